/* options.h: parsing and help for the commands that share cli_opts. */
#ifndef AL_OPTIONS_H
#define AL_OPTIONS_H

#include <stdbool.h>
#include <stdio.h>

#include "cli.h"

/* Is this a command whose options cli_parse knows? */
bool cli_has_opts(const char *command);
/* Fills o from argv (argv[1] is the command): 0, -1 after printing help, or an exit
 * status with the message printed. Refuses unknown options and options the command
 * does not use. */
int cli_parse(int argc, char **argv, cli_opts *o);
/* The command's usage and every option it takes, with its default, on stdout. */
void cli_help(const char *command);
/* One line per command that shares these options. */
void cli_list_commands(FILE *f);

#endif /* AL_OPTIONS_H */
