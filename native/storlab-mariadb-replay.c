/* storlab-mariadb-replay: replays a MariaDB statement log on its captured schedule, one thread and
 * one connection per captured session (storlab.workloads.mariadb_log writes the log it reads).
 *
 *   storlab-mariadb-replay SOCKET USER DATABASE SPEED LOG
 *
 * LOG holds one event a line: microseconds from the log's start, the session's number, what it does
 * (C connect, Q query, U change to DATABASE, X quit), the captured log's line, the statement (escaped:
 * \t \n \r \0 \\), tab-separated. Each session's events run in order, each when the schedule says
 * (its time divided by SPEED), on a thread of its own: a slow statement holds back its own session
 * only. A thread is started shortly before its session's first event and ends at its quit, so the
 * threads at once are the sessions open at once. Errors are counted by their MariaDB error number and
 * never stop the replay. At the end it prints its figures, one per line (`name value`), then a
 * `second` line per second of the schedule (statements due, their mean and largest lag) and an
 * `error` line per error number (count, the first one's log line, message and statement).
 *
 * Exit codes: 0 replayed (errors included), 2 a LOG it cannot read, 1 anything else. */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <mysql.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Threads are started this far ahead of their session's first event: a thread's creation and its
 * first wake-up take tens of microseconds, far under it. */
#define LEAD_NS 20000000LL
/* The schedule starts this long after the log is read: the first sessions' threads are started meanwhile. */
#define START_NS 100000000LL
#define STACK_BYTES (256 * 1024)
/* Lag histogram: 1 us buckets below 4,096 us, then 128 buckets per doubling (under 1 % of a value). */
#define FINE 4096
#define PER_DOUBLING 128
#define DOUBLINGS 28
#define BUCKETS (FINE + PER_DOUBLING * DOUBLINGS)
#define MAX_ERROR_KINDS 64
#define SAID 200

typedef struct {
    int64_t at_us;
    int session;
    char kind;
    long line;
    long order; /* its line in LOG: two events of one captured line keep LOG's order */
    char *text;
    size_t length;
} event_t;

typedef struct {
    event_t *events; /* its own, in order */
    size_t count;
    int64_t first_ns;
    pthread_t thread;
} session_t;

typedef struct {
    unsigned number;
    long count;
    long line;
    char message[SAID];
    char statement[SAID];
} error_kind_t;

typedef struct {
    _Atomic long statements;
    _Atomic long lag_sum_us;
    _Atomic long lag_max_us;
} second_t;

static const char *socket_path, *user, *database;
static double speed;
static int64_t start_ns;
static session_t *sessions;
static long session_count;
static second_t *seconds;
static long second_count;
static _Atomic long histogram[BUCKETS];
static _Atomic long statements, errors, connections, open_now, most_open, duration_sum_us, duration_max_us;
static _Atomic int64_t last_end_ns;
static error_kind_t error_kinds[MAX_ERROR_KINDS];
static int error_kind_count;
static long other_errors;
static pthread_mutex_t error_lock = PTHREAD_MUTEX_INITIALIZER;

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* A thread woken from clock_nanosleep runs tens of microseconds late (more when the CPUs are busy):
 * a statement's thread sleeps until this long before it is due, then spins on the clock. The spin
 * costs at most this much CPU per statement (10 % of a core at 2,000 statements a second). */
#define SPIN_NS 60000LL
#if defined(__x86_64__) || defined(__i386__)
#define RELAX() __builtin_ia32_pause()
#else
#define RELAX() ((void)0)
#endif

static void sleep_until(int64_t ns) {
    struct timespec t = {ns / 1000000000LL, ns % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR) {
    }
}

static void wait_until(int64_t ns) {
    if (now_ns() < ns - SPIN_NS)
        sleep_until(ns - SPIN_NS);
    while (now_ns() < ns)
        RELAX();
}

static int64_t due_ns(const event_t *e) { return start_ns + (int64_t)((double)e->at_us * 1000.0 / speed); }

static void atomic_max(_Atomic long *where, long value) {
    long seen = atomic_load(where);
    while (value > seen && !atomic_compare_exchange_weak(where, &seen, value)) {
    }
}

static int bucket(long us) {
    if (us < FINE)
        return (int)us;
    int doubling = 63 - __builtin_clzl((unsigned long)us) - 12; /* FINE is 2^12 */
    if (doubling >= DOUBLINGS)
        return BUCKETS - 1;
    long base = FINE << doubling;
    return FINE + doubling * PER_DOUBLING + (int)((us - base) * PER_DOUBLING / base);
}

static double bucket_us(int b) {
    if (b < FINE)
        return b;
    int doubling = (b - FINE) / PER_DOUBLING;
    double base = (double)(FINE << doubling);
    return base + ((b - FINE) % PER_DOUBLING + 0.5) * base / PER_DOUBLING;
}

static void copy_said(char *to, const char *from, size_t length) {
    size_t n = length < SAID - 1 ? length : SAID - 1;
    for (size_t i = 0; i < n; i++)
        to[i] = (from[i] == '\n' || from[i] == '\t' || from[i] == '\r') ? ' ' : from[i];
    to[n] = 0;
}

static void count_error(unsigned number, const char *message, const event_t *e) {
    atomic_fetch_add(&errors, 1);
    pthread_mutex_lock(&error_lock);
    int i = 0;
    while (i < error_kind_count && error_kinds[i].number != number)
        i++;
    if (i == error_kind_count) {
        if (error_kind_count == MAX_ERROR_KINDS) {
            other_errors++;
            pthread_mutex_unlock(&error_lock);
            return;
        }
        error_kind_count++;
        error_kinds[i].number = number;
        error_kinds[i].line = e->line;
        copy_said(error_kinds[i].message, message, strlen(message));
        copy_said(error_kinds[i].statement, e->text, e->length);
    }
    error_kinds[i].count++;
    pthread_mutex_unlock(&error_lock);
}

static void record_lag(int64_t due, int64_t sent) {
    long lag_us = sent > due ? (long)((sent - due) / 1000) : 0;
    atomic_fetch_add(&histogram[bucket(lag_us)], 1);
    long s = (long)((due - start_ns) / 1000000000LL);
    if (s >= 0 && s < second_count) {
        atomic_fetch_add(&seconds[s].statements, 1);
        atomic_fetch_add(&seconds[s].lag_sum_us, lag_us);
        atomic_max(&seconds[s].lag_max_us, lag_us);
    }
}

/* The replay ends when its last event does: a session's previous event has ended when it turns to
 * its next, and its last when it leaves its loop. */
static void mark_end(void) {
    int64_t done = now_ns();
    int64_t seen = atomic_load(&last_end_ns);
    while (done > seen && !atomic_compare_exchange_weak(&last_end_ns, &seen, done)) {
    }
}

static void *replay_session(void *arg) {
    session_t *session = arg;
    MYSQL *conn = NULL;
    int connected = 0;
    /* The default 50 us of timer slack would be part of every statement's lag. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    for (size_t i = 0; i < session->count; i++) {
        const event_t *e = &session->events[i];
        int64_t due = due_ns(e);
        if (i > 0)
            mark_end();
        wait_until(due);
        if (e->kind == 'X') {
            if (conn != NULL) {
                mysql_close(conn);
                conn = NULL;
                if (connected)
                    atomic_fetch_sub(&open_now, 1);
            }
            connected = 0;
            continue;
        }
        if (conn == NULL) { /* its Connect, or its first event when the log missed its Connect */
            unsigned int no = 0;
            conn = mysql_init(NULL);
            if (conn == NULL) {
                count_error(2008, "out of memory for a connection", e);
                continue;
            }
            mysql_optionsv(conn, MYSQL_OPT_LOCAL_INFILE, &no);
            connected = mysql_real_connect(conn, NULL, user, NULL, database, 0, socket_path,
                                           CLIENT_MULTI_STATEMENTS | CLIENT_MULTI_RESULTS) != NULL;
            if (!connected) {
                count_error(mysql_errno(conn), mysql_error(conn), e);
            } else {
                atomic_fetch_add(&connections, 1);
                atomic_max(&most_open, atomic_fetch_add(&open_now, 1) + 1);
            }
            if (e->kind == 'C')
                continue;
        }
        if (e->kind == 'U') {
            if (!connected)
                count_error(2006, "not connected", e);
            else if (mysql_select_db(conn, database) != 0)
                count_error(mysql_errno(conn), mysql_error(conn), e);
            continue;
        }
        /* A query. */
        int64_t sent = now_ns();
        record_lag(due, sent);
        atomic_fetch_add(&statements, 1);
        if (!connected) {
            count_error(2006, "not connected", e);
            continue;
        }
        int failed = mysql_real_query(conn, e->text, e->length) != 0;
        while (!failed) {
            MYSQL_RES *result = mysql_store_result(conn);
            if (result != NULL)
                mysql_free_result(result);
            else if (mysql_field_count(conn) != 0) {
                failed = 1;
                break;
            }
            int more = mysql_next_result(conn);
            if (more > 0)
                failed = 1;
            if (more != 0)
                break;
        }
        if (failed)
            count_error(mysql_errno(conn), mysql_error(conn), e);
        long took_us = (long)((now_ns() - sent) / 1000);
        atomic_fetch_add(&duration_sum_us, took_us);
        atomic_max(&duration_max_us, took_us);
    }
    mark_end();
    if (conn != NULL) {
        mysql_close(conn);
        if (connected)
            atomic_fetch_sub(&open_now, 1);
    }
    mysql_thread_end();
    return NULL;
}

static int refuse(const char *path, long line, const char *why) {
    fprintf(stderr, "storlab-mariadb-replay: %s line %ld: %s\n", path, line, why);
    return 2;
}

/* The escapes storlab writes, undone in place; the new length. */
static size_t unescape(char *text) {
    char *out = text;
    for (char *in = text; *in; in++) {
        if (*in == '\\' && in[1]) {
            in++;
            *out++ = *in == 't' ? '\t' : *in == 'n' ? '\n' : *in == 'r' ? '\r' : *in == '0' ? '\0' : *in;
        } else {
            *out++ = *in;
        }
    }
    *out = 0;
    return (size_t)(out - text);
}

static int by_session(const void *a, const void *b) {
    const event_t *x = a, *y = b;
    return x->session != y->session ? (x->session > y->session) - (x->session < y->session)
           : x->line != y->line     ? (x->line > y->line) - (x->line < y->line)
                                     : (x->order > y->order) - (x->order < y->order);
}

static int by_first(const void *a, const void *b) {
    const session_t *x = a, *y = b;
    return (x->first_ns > y->first_ns) - (x->first_ns < y->first_ns);
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: storlab-mariadb-replay SOCKET USER DATABASE SPEED LOG\n");
        return 2;
    }
    socket_path = argv[1];
    user = argv[2];
    database = argv[3];
    speed = strtod(argv[4], NULL);
    if (!(speed > 0) || !isfinite(speed)) {
        fprintf(stderr, "storlab-mariadb-replay: %s is not a speed above 0\n", argv[4]);
        return 2;
    }
    const char *path = argv[5];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "storlab-mariadb-replay: %s: %s\n", path, strerror(errno));
        return 2;
    }
    char *text = malloc((size_t)st.st_size + 1);
    size_t have = 0;
    while (text != NULL && have < (size_t)st.st_size) {
        ssize_t n = read(fd, text + have, (size_t)st.st_size - have);
        if (n <= 0)
            break;
        have += (size_t)n;
    }
    close(fd);
    if (text == NULL || have != (size_t)st.st_size) {
        fprintf(stderr, "storlab-mariadb-replay: %s: cannot read it\n", path);
        return 1;
    }
    text[have] = 0;

    size_t lines = 0;
    for (size_t i = 0; i < have; i++)
        lines += text[i] == '\n';
    event_t *events = calloc(lines + 1, sizeof *events);
    size_t count = 0;
    long line = 0;
    for (char *at = text; *at; line++) {
        char *end = strchr(at, '\n');
        if (end == NULL)
            return refuse(path, line + 1, "no newline at its end");
        *end = 0;
        char *field[5];
        field[0] = at;
        for (int f = 1; f < 5; f++) {
            char *tab = field[f - 1] ? strchr(field[f - 1], '\t') : NULL;
            if (tab == NULL)
                return refuse(path, line + 1, "not 5 tab-separated fields");
            *tab = 0;
            field[f] = tab + 1;
        }
        event_t *e = &events[count++];
        char *rest;
        e->at_us = strtoll(field[0], &rest, 10);
        if (*rest || e->at_us < 0)
            return refuse(path, line + 1, "its time is not a number of microseconds");
        long s = strtol(field[1], &rest, 10);
        if (*rest || s < 0 || s > 100000000)
            return refuse(path, line + 1, "its session is not a number");
        e->session = (int)s;
        if (strlen(field[2]) != 1 || !strchr("CQUX", field[2][0]))
            return refuse(path, line + 1, "its kind is not C, Q, U or X");
        e->kind = field[2][0];
        e->line = strtol(field[3], NULL, 10);
        e->order = line;
        e->text = field[4];
        e->length = unescape(field[4]);
        if (e->session + 1 > session_count)
            session_count = e->session + 1;
        at = end + 1;
    }
    if (count == 0)
        return refuse(path, 1, "no event");
    qsort(events, count, sizeof *events, by_session);
    sessions = calloc((size_t)session_count, sizeof *sessions);
    int64_t last_us = 0;
    for (size_t i = 0; i < count; i++) {
        session_t *s = &sessions[events[i].session];
        if (s->count == 0)
            s->events = &events[i];
        s->count++;
        if (events[i].at_us > last_us)
            last_us = events[i].at_us;
    }
    second_count = (long)((double)last_us / 1e6 / speed) + 2;
    seconds = calloc((size_t)second_count, sizeof *seconds);
    if (mysql_library_init(0, NULL, NULL) != 0) {
        fprintf(stderr, "storlab-mariadb-replay: the client library did not start\n");
        return 1;
    }
    /* storlab starts it from a descriptor (/proc/self/fd/N), which would be its name in ps and top. */
    prctl(PR_SET_NAME, "storlab-mariadb-replay", 0, 0, 0);
    signal(SIGPIPE, SIG_IGN);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, STACK_BYTES);
    start_ns = now_ns() + START_NS;
    for (long i = 0; i < session_count; i++)
        sessions[i].first_ns = sessions[i].count ? due_ns(&sessions[i].events[0]) : start_ns;
    qsort(sessions, (size_t)session_count, sizeof *sessions, by_first);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    for (long i = 0; i < session_count; i++) {
        if (sessions[i].count == 0)
            continue;
        sleep_until(sessions[i].first_ns - LEAD_NS);
        int failed = pthread_create(&sessions[i].thread, &attr, replay_session, &sessions[i]);
        if (failed) {
            fprintf(stderr, "storlab-mariadb-replay: cannot start session %ld's thread: %s\n", i, strerror(failed));
            _exit(1);
        }
    }
    for (long i = 0; i < session_count; i++)
        if (sessions[i].count)
            pthread_join(sessions[i].thread, NULL);
    int64_t ended = now_ns();
    int64_t last = atomic_load(&last_end_ns);

    long total = 0, p50 = -1, p99 = -1, max = 0;
    for (int b = 0; b < BUCKETS; b++)
        total += histogram[b];
    long seen = 0;
    for (int b = 0; b < BUCKETS; b++) {
        if (!histogram[b])
            continue;
        seen += histogram[b];
        if (p50 < 0 && seen * 2 >= total)
            p50 = b;
        if (p99 < 0 && seen * 100 >= total * 99)
            p99 = b;
        max = b;
    }
    printf("elapsed_s %.6f\n", (double)((last > 0 ? last : ended) - start_ns) / 1e9);
    printf("schedule_s %.6f\n", (double)last_us / 1e6 / speed);
    printf("statements %ld\nerrors %ld\nconnections %ld\nconnections_max %ld\n", (long)statements, (long)errors,
           (long)connections, (long)most_open);
    if (total) {
        printf("lag_p50_ms %.3f\nlag_p99_ms %.3f\nlag_max_ms %.3f\n", bucket_us((int)p50) / 1000,
               bucket_us((int)p99) / 1000, bucket_us((int)max) / 1000);
        printf("statement_avg_ms %.3f\nstatement_max_ms %.3f\n", (double)duration_sum_us / 1000 / (double)statements,
               (double)duration_max_us / 1000);
    }
    for (long s = 0; s < second_count; s++)
        if (seconds[s].statements)
            printf("second %ld %ld %.3f %.3f\n", s, (long)seconds[s].statements,
                   (double)seconds[s].lag_sum_us / 1000 / (double)seconds[s].statements,
                   (double)seconds[s].lag_max_us / 1000);
    for (int i = 0; i < error_kind_count; i++)
        printf("error %u %ld %ld %s\t%s\n", error_kinds[i].number, error_kinds[i].count, error_kinds[i].line,
               error_kinds[i].message, error_kinds[i].statement);
    if (other_errors)
        printf("error 0 %ld 0 of other error numbers\t\n", other_errors);
    mysql_library_end();
    return 0;
}
