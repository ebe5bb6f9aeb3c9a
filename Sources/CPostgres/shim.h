// libpq, PostgreSQL's own client library (Debian's libpq-dev): the blocking calls the
// shared-state store makes on its own threads.
#include <libpq-fe.h>
