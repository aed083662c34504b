/* cmd_quantize.h: `anyllm quantize` and `anyllm gen-model`, which parse their own
 * arguments (argv[0] is the command name) and return an exit status. */
#ifndef AL_CMD_QUANTIZE_H
#define AL_CMD_QUANTIZE_H

int cmd_quantize(int argc, char **argv);
int cmd_gen_model(int argc, char **argv);

#endif /* AL_CMD_QUANTIZE_H */
