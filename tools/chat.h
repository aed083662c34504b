/* chat.h: the pieces of `anyllm chat` (cmd_chat.c): the conversation and its JSON file
 * (chat_conv.c), and the lines typed at the prompt (chat_input.c). */
#ifndef AL_CHAT_H
#define AL_CHAT_H

#include <stdbool.h>
#include <stdio.h>

#include "cli.h"

/* ---- the conversation (chat_conv.c) --------------------------------------------------- */

/* The messages in order. Each role is one of the static strings "system", "user",
 * "assistant"; each content is owned (malloc'd) by the conversation. */
typedef struct chat_conv {
    al_chat_message *msgs;
    int n, cap;
} chat_conv;

/* Appends a copy of content. role must be "system", "user" or "assistant" (any other
 * string is refused). 0, or 1 with a message printed (out of memory, bad role). */
int conv_add(chat_conv *cv, const char *role, const char *content);
/* Removes count messages from index first on, freeing their text. */
void conv_remove(chat_conv *cv, int first, int count);
/* Drops the oldest turn: the first message that is not a system one and the messages
 * after it up to the next user message, system ones kept. The last message (the newest
 * user message) always stays. false if there is nothing to drop. */
bool conv_drop_turn(chat_conv *cv);
/* Forgets every message, or every message but the system ones when keep_system. */
void conv_clear(chat_conv *cv, bool keep_system);
void conv_free(chat_conv *cv); /* the conversation is then empty and reusable */
/* Writes {"messages":[{"role":..,"content":..},...]} to path. 0, or 1 (message printed). */
int conv_save(const chat_conv *cv, const char *path);
/* Reads a file conv_save wrote (or any of that shape) into *out, which must be empty.
 * On failure *out stays empty and one line says why: the file cannot be read, is not
 * JSON, has another shape, or a message has an unknown role. 0 or 1. */
int conv_load(chat_conv *out, const char *path);

/* ---- the lines typed (chat_input.c) --------------------------------------------------- */

typedef enum chat_read {
    CHAT_LINE,      /* a line (without its newline) */
    CHAT_EOF,       /* end of input: Ctrl-D, or the pipe is done */
    CHAT_INTERRUPT, /* Ctrl-C at the prompt */
} chat_read;

typedef struct chat_input {
    bool tty;        /* stdin is a terminal: line editing, history, Ctrl-C handled */
    bool typed;      /* CHAT_INTERRUPT: keys had been typed on the line it cancelled */
    char *line;      /* the last line read, owned */
    size_t cap;
} chat_input;

/* On a terminal: installs the SIGINT handler (which sets cli_interrupted, so a reply
 * or a prompt being read stops) and prepares line editing. On a pipe: nothing; SIGINT
 * keeps its default action (the program ends), as for every other command. */
void chat_input_open(chat_input *in);
/* Shows the prompt (a terminal only) and reads one line into in->line. Clears
 * cli_interrupted first. */
chat_read chat_input_read(chat_input *in);
/* Restores SIGINT's action and frees the line. */
void chat_input_close(chat_input *in);

#endif /* AL_CHAT_H */
