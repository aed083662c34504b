/* error.h: a refused request: the HTTP status and the OpenAI error object's fields.
 * api.c, tools.c and http.c fill them; api.c writes them out (srv_api_error_body). */
#ifndef AL_SERVER_ERROR_H
#define AL_SERVER_ERROR_H

#include <stdbool.h>

typedef struct srv_error {
    int status;       /* HTTP status: 400, 401, 404, 413, 429, 500, 503, ...  */
    const char *type; /* "invalid_request_error", "server_error", ...         */
    const char *code; /* machine-readable, or NULL                            */
    char param[64];   /* the request field at fault, or "" (JSON null)        */
    char message[512];
} srv_error;

/* Fills *err and returns false, so refusals read `return srv_fail(err, 400, ...);`. */
#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
bool srv_fail(srv_error *err, int status, const char *param, const char *code,
              const char *fmt, ...);

#endif /* AL_SERVER_ERROR_H */
