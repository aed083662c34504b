/* chat_input.c: the lines of `anyllm chat`. On a terminal they come from libedit's
 * readline (line editing, arrow keys, history in memory) and Ctrl-C is caught; on a
 * pipe they are plain getline lines and SIGINT keeps its default action.
 *
 * Ctrl-C must make readline return, which libedit does not do by itself: its read
 * retries once after EINTR and then blocks again, and with its own signal handling
 * (rl_catch_signals) it re-raises the signal to the whole process group. So libedit's
 * handling is off and it reads through input_getc, which waits with poll on stdin and
 * on a pipe the SIGINT handler writes a byte to (the self-pipe trick: the signal may be
 * delivered to any thread, e.g. a worker of the CPU pool, and poll still wakes), and
 * returns end-of-input once cli_interrupted is set. */
#include <errno.h>
#include <fcntl.h>
#include <langinfo.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <editline/readline.h>

#include "chat.h"
#include "gen.h"

static int wake_pipe[2] = {-1, -1}; /* the SIGINT handler writes to [1], poll reads [0] */
static struct sigaction old_sigint;
static int n_keys; /* keys read since the prompt was shown */

static void on_sigint(int sig) {
    (void)sig;
    int saved = errno;
    cli_interrupted = 1;
    if (wake_pipe[1] >= 0) {
        ssize_t w = write(wake_pipe[1], "", 1); /* full pipe: a wake-up is pending anyway */
        (void)w;
    }
    errno = saved;
}

/* Reads one byte of stdin, or -1 at its end, on an error or once Ctrl-C was pressed. */
static int read_byte(void) {
    for (;;) {
        if (cli_interrupted) return -1;
        struct pollfd p[2] = {{.fd = 0, .events = POLLIN}, {.fd = wake_pipe[0], .events = POLLIN}};
        int r = poll(p, 2, -1);
        if (r < 0 && errno != EINTR) return -1;
        if (r <= 0 || !p[0].revents) continue; /* a signal or the pipe: check the flag */
        unsigned char b;
        ssize_t n = read(0, &b, 1);
        if (n == 1) return b;
        if (n == 0 || errno != EINTR) return -1;
    }
}

/* libedit's getc: one character. In a UTF-8 locale libedit takes a code point here
 * (its own reader decodes multibyte input; this one must too), else a byte. */
static int input_getc(FILE *f) {
    (void)f;
    int b = read_byte();
    if (b < 0) return EOF;
    n_keys++;
    if (b < 0x80 || MB_CUR_MAX == 1) return b;
    int len = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 0;
    if (len == 0) return 0xfffd; /* a stray continuation byte */
    int cp = b & (0x7f >> len);
    for (int i = 1; i < len; i++) {
        int c = read_byte();
        if (c < 0) return EOF;
        if ((c & 0xc0) != 0x80) return 0xfffd; /* a broken sequence */
        cp = cp << 6 | (c & 0x3f);
    }
    return cp;
}

/* libedit edits in the locale's character set; messages are UTF-8, so the editing is
 * too: the user's locale if it is UTF-8, else C.UTF-8 (glibc has it built in). Only
 * LC_CTYPE changes, so numbers still print with a dot. */
static void use_utf8(void) {
    const char *l = setlocale(LC_CTYPE, "");
    if (l && !strcmp(nl_langinfo(CODESET), "UTF-8")) return;
    if (!setlocale(LC_CTYPE, "C.UTF-8")) setlocale(LC_CTYPE, "C");
}

void chat_input_open(chat_input *in) {
    *in = (chat_input){.tty = isatty(0)};
    if (!in->tty) return;
    use_utf8();
    if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) wake_pipe[0] = wake_pipe[1] = -1;
    /* no SA_RESTART: a Ctrl-C must end a blocking read, not resume it */
    struct sigaction sa = {.sa_handler = on_sigint};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_sigint);
    rl_catch_signals = 0;
    rl_getc_function = input_getc;
    rl_instream = stdin;
    rl_outstream = stderr; /* the prompt and the echo; stdout holds only the replies */
    using_history();
}

/* Empties the wake-up pipe, so that an old Ctrl-C does not end the next read. */
static void drain_wake_pipe(void) {
    char buf[64];
    while (wake_pipe[0] >= 0 && read(wake_pipe[0], buf, sizeof buf) > 0) {}
}

static chat_read read_tty(chat_input *in) {
    drain_wake_pipe();
    cli_interrupted = 0;
    n_keys = 0;
    char *l = readline("> ");
    if (cli_interrupted) {
        in->typed = n_keys > 0;
        free(l);
        return CHAT_INTERRUPT;
    }
    if (!l) return CHAT_EOF;
    size_t len = strlen(l);
    if (len + 1 > in->cap) {
        char *p = realloc(in->line, len + 1);
        if (!p) {
            free(l);
            cli_fail("out of memory");
            return CHAT_EOF;
        }
        in->line = p;
        in->cap = len + 1;
    }
    memcpy(in->line, l, len + 1);
    if (len) add_history(l);
    free(l);
    return CHAT_LINE;
}

chat_read chat_input_read(chat_input *in) {
    if (in->tty) return read_tty(in);
    cli_interrupted = 0;
    ssize_t got = getline(&in->line, &in->cap, stdin);
    if (got < 0) return CHAT_EOF;
    while (got > 0 && (in->line[got - 1] == '\n' || in->line[got - 1] == '\r')) in->line[--got] = 0;
    /* a message is a C string: the bytes after a NUL would vanish unseen */
    if (memchr(in->line, 0, (size_t)got)) {
        fprintf(stderr, "anyllm: chat: this line holds a NUL byte and is skipped\n");
        in->line[0] = 0;
    }
    return CHAT_LINE;
}

void chat_input_close(chat_input *in) {
    if (in->tty) {
        sigaction(SIGINT, &old_sigint, NULL);
        clear_history();
        for (int i = 0; i < 2; i++)
            if (wake_pipe[i] >= 0) close(wake_pipe[i]);
        wake_pipe[0] = wake_pipe[1] = -1;
    }
    free(in->line);
    *in = (chat_input){0};
}
