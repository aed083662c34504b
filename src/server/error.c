/* error.c: srv_fail (see error.h). */
#include <stdarg.h>
#include <stdio.h>

#include "server/error.h"

bool srv_fail(srv_error *err, int status, const char *param, const char *code, const char *fmt,
              ...) {
    err->status = status;
    err->type = status >= 500 ? "server_error" : "invalid_request_error";
    err->code = code;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return false;
}
