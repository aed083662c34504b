/* reply.c: identifiers, finish reasons and the JSON and event writers (see reply.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/reply.h"

void srv_new_id(const char *prefix, char *out, size_t cap) {
    /* splitmix64 over a shared counter and the clock: distinct per call, not guessable
     * from the previous one without the clock */
    static uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t h[2];
    for (int i = 0; i < 2; i++) {
        uint64_t z = __atomic_add_fetch(&counter, 0x9e3779b97f4a7c15ull, __ATOMIC_RELAXED) ^
                     ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        h[i] = z ^ (z >> 31);
    }
    snprintf(out, cap, "%s%016llx%08llx", prefix, (unsigned long long)h[0],
             (unsigned long long)(h[1] >> 32));
}

const char *srv_finish_reason(srv_finish f) {
    return f == SRV_FINISH_STOP ? "stop" : f == SRV_FINISH_LENGTH ? "length" : NULL;
}

const char *srv_reply_finish(srv_finish f, int n_calls) {
    return f == SRV_FINISH_STOP && n_calls > 0 ? "tool_calls" : srv_finish_reason(f);
}

bool srv_json_out(json_t *obj, srv_buf *out) {
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    bool ok = s && srv_buf_str(out, s);
    free(s);
    return ok;
}

bool srv_sse_typed(const char *type, json_t *obj, srv_buf *out) {
    if (obj) json_object_set_new(obj, "type", json_string(type));
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    bool ok = s && srv_buf_printf(out, "event: %s\ndata: %s\n\n", type, s);
    free(s);
    return ok;
}

long srv_text_parts(const json_t *c, const char *const *types, srv_buf *out) {
    if (json_is_string(c)) {
        srv_buf_add(out, json_string_value(c), json_string_length(c));
        return -1;
    }
    if (!json_is_array(c)) return -2;
    for (size_t k = 0; k < json_array_size(c); k++) {
        json_t *part = json_array_get(c, k), *text = json_object_get(part, "text");
        const char *type = json_string_value(json_object_get(part, "type"));
        bool known = false;
        for (int t = 0; type && types[t] && !known; t++)
            known = !strcmp(type, types[t]);
        if (!known || !json_is_string(text)) return (long)k;
        srv_buf_add(out, json_string_value(text), json_string_length(text));
    }
    return -1;
}
