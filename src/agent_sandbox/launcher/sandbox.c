/*
 * sandbox: the native front of the `sandbox` command.
 *
 * `sandbox exec --settings FILE [--cwd DIR] -- CMD [ARG...]` is replayed here
 * from the plan file the Python runtime wrote for the same inputs (see
 * agent_sandbox/runtime/plancache.py), so a sandbox starts without starting
 * Python. The plan is used only when every input it recorded still gives the
 * same answer: the user, the working directory, the environment variables the
 * runtime reads, the settings file's exact bytes, the host profile, and every
 * question the planner asked the filesystem (a path's kind, its resolved form,
 * a bounded directory walk). Anything else, any doubt, and every other
 * subcommand run the Python entry point (`sandbox-py`, next to this program),
 * which plans afresh and writes a new plan file.
 *
 * Once a plan is accepted this does what the Python runtime does for the bwrap
 * backend, in the same order: protected-name placeholders under the per-user
 * lock, bwrap held at --block-fd, the proxy ports opened inside the sandbox's
 * network namespace, the two-step start gate, signals forwarded, the proxy
 * started on the first connection (the Python proxy, handed the listening
 * sockets), and after the command: the sweep for protected names created deep
 * in a writable root (the Python sweep runs whenever this walk sees anything
 * written under a protected name), placeholder cleanup, the exit status.
 *
 * It never runs a command outside bwrap: every failure before the command
 * starts either falls back to the Python runtime (nothing started yet) or
 * exits 125 with the cause.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define VERSION "agent-sandbox-plan 1"
#define PROFILE "/etc/agent-sandbox/exec.json"
#define SYSTEM_SETTINGS "/etc/agent-sandbox/srt-settings.json"
#define FAILED 125
#define FD_SECCOMP 1001
#define FD_INFO 1002
#define FD_BLOCK 1003
#define FD_GATE 1004
#define FD_READY 1005
#define HTTP_PORT 3128
#define SOCKS_PORT 1080
#define SWEEP_BUDGET 200000
#define INSIDE_LIMIT 2000

extern char **environ;
static char **orig_argv;
static char self_dir[PATH_MAX];
static const char *walk_skip; /* the lock folder: never walked into (bwrap.RealFs skip) */

/* ---- small helpers --------------------------------------------------------- */

/* Run the Python entry point instead; AGENT_SANDBOX_TRACE=1 says why. */
static void fallback_because(const char *why) {
    signal(SIGPIPE, SIG_DFL);
    if (why && getenv("AGENT_SANDBOX_TRACE")) fprintf(stderr, "sandbox: plan not replayed: %s\n", why);
    char py[PATH_MAX + 16];
    snprintf(py, sizeof py, "%s/sandbox-py", self_dir);
    execv(py, orig_argv);
    fprintf(stderr, "sandbox: cannot run %s: %s\n", py, strerror(errno));
    _exit(FAILED);
}

static void die(const char *msg) {
    fprintf(stderr, "sandbox exec: the sandbox could not start: %s\n", msg);
    _exit(FAILED);
}

static char *read_file(const char *path, size_t *len, int nofollow) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { close(fd); return NULL; }
    if (nofollow && (st.st_uid != getuid() || (st.st_mode & 022))) { close(fd); return NULL; }
    size_t cap = (size_t)st.st_size + 1, n = 0;
    char *buf = malloc(cap);
    if (!buf) { close(fd); return NULL; }
    for (;;) {
        if (n == cap) { cap *= 2; char *b = realloc(buf, cap); if (!b) { free(buf); close(fd); return NULL; } buf = b; }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) { if (errno == EINTR) continue; free(buf); close(fd); return NULL; }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    *len = n;
    return buf;
}

static int owned_dir(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid()
           && !(st.st_mode & 022);
}

static void write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) { if (errno == EINTR) continue; return; }
        p += w; n -= (size_t)w;
    }
}

static char *path_join(const char *d, const char *name) {
    size_t a = strlen(d), b = strlen(name);
    char *out = malloc(a + b + 2);
    if (!out) return NULL;
    memcpy(out, d, a);
    size_t k = a;
    if (a == 0 || d[a - 1] != '/') out[k++] = '/';
    memcpy(out + k, name, b + 1);
    return out;
}

#define fallback(why) fallback_because(why)

/* ---- Python's os.path.realpath (non-strict), to compare recorded answers ---- */

struct seen { char *link; char *to; int resolved; };
struct seenset { struct seen *v; size_t n, cap; };

static int join_real(char *path, size_t cap, const char *rest, struct seenset *s, int depth) {
    if (depth > 40) return -1;
    if (rest[0] == '/') { strcpy(path, "/"); rest++; }
    char name[NAME_MAX + 2];
    while (*rest) {
        const char *slash = strchr(rest, '/');
        size_t len = slash ? (size_t)(slash - rest) : strlen(rest);
        if (len > NAME_MAX) return -1;
        memcpy(name, rest, len); name[len] = 0;
        rest += len + (slash ? 1 : 0);
        if (len == 0 || strcmp(name, ".") == 0) continue;
        if (strcmp(name, "..") == 0) {
            char *cut = strrchr(path, '/');
            if (!cut) return -1;
            if (cut == path) path[1] = 0; else *cut = 0;
            continue;
        }
        size_t pl = strlen(path);
        if (pl + len + 2 >= cap) return -1;
        char newpath[PATH_MAX * 2];
        snprintf(newpath, sizeof newpath, "%s%s%s", path, (pl && path[pl - 1] == '/') ? "" : "/", name);
        struct stat st;
        if (lstat(newpath, &st) != 0 || !S_ISLNK(st.st_mode)) { strcpy(path, newpath); continue; }
        size_t i;
        for (i = 0; i < s->n; i++) if (strcmp(s->v[i].link, newpath) == 0) break;
        if (i < s->n) {
            if (!s->v[i].resolved) return -1; /* a loop: leave it to the Python runtime */
            strcpy(path, s->v[i].to);
            continue;
        }
        char target[PATH_MAX];
        ssize_t tl = readlink(newpath, target, sizeof target - 1);
        if (tl < 0) return -1;
        target[tl] = 0;
        if (s->n == s->cap) {
            s->cap = s->cap ? s->cap * 2 : 16;
            struct seen *nv = realloc(s->v, s->cap * sizeof *nv);
            if (!nv) return -1;
            s->v = nv;
        }
        size_t me = s->n++;
        s->v[me].link = strdup(newpath); s->v[me].to = NULL; s->v[me].resolved = 0;
        if (join_real(path, cap, target, s, depth + 1) != 0) return -1;
        s->v[me].to = strdup(path); s->v[me].resolved = 1;
    }
    return 0;
}

static int py_realpath(const char *in, char *out, size_t cap) {
    if (in[0] != '/') return -1;
    struct seenset s = {0};
    strcpy(out, "/");
    int rc = join_real(out, cap, in, &s, 0);
    for (size_t i = 0; i < s.n; i++) { free(s.v[i].link); free(s.v[i].to); }
    free(s.v);
    return rc;
}

/* ---- the bounded walk of bwrap.RealFs, compared entry by entry ------------- */

static const char *SKIP_DIRS[] = {"node_modules", ".git", ".venv", "venv", "__pycache__", ".tox",
                                  ".mypy_cache", ".ruff_cache", ".pytest_cache", NULL};
static int in_list(const char *name, const char **list) {
    for (; *list; list++) if (strcmp(name, *list) == 0) return 1;
    return 0;
}

struct frame { char *path; int level; };
struct stack { struct frame *v; size_t n, cap; };
static int push(struct stack *s, char *path, int level) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        struct frame *nv = realloc(s->v, s->cap * sizeof *nv);
        if (!nv) return -1;
        s->v = nv;
    }
    s->v[s->n].path = path; s->v[s->n].level = level; s->n++;
    return 0;
}

struct ent { char *name; unsigned char type; };
static struct ent *list_dir(const char *d, size_t *count) {
    DIR *dir = opendir(d);
    if (!dir) return NULL;
    size_t n = 0, cap = 32;
    struct ent *v = malloc(cap * sizeof *v);
    struct dirent *e;
    while (v && (e = readdir(dir))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (n == cap) { cap *= 2; struct ent *nv = realloc(v, cap * sizeof *nv); if (!nv) { free(v); v = NULL; break; } v = nv; }
        v[n].name = strdup(e->d_name); v[n].type = e->d_type; n++;
    }
    closedir(dir);
    *count = n;
    return v;
}
static void free_list(struct ent *v, size_t n) { for (size_t i = 0; i < n; i++) free(v[i].name); free(v); }

static int is_dir_nofollow(const char *path, unsigned char type) {
    if (type != DT_UNKNOWN) return type == DT_DIR;
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The one bounded walk of this program, in the order of the Python walks it mirrors
 * (bwrap.RealFs, sweep.find_new): a folder's entries in readdir order, folders taken
 * last pushed first. visit() sees every entry with its full path and answers WALK_NEXT,
 * WALK_DESCEND (walk into it, one level deeper) or WALK_STOP. Returns WALK_STOP when
 * visit stopped it, WALK_BUDGET after more than `budget` entries, WALK_NOMEM when out of
 * memory, WALK_NEXT when it ran to the end. `st` holds the starting folders. */
enum { WALK_NEXT, WALK_DESCEND, WALK_STOP, WALK_BUDGET, WALK_NOMEM };
typedef int (*visit_fn)(void *ctx, const struct frame *dir, const struct ent *e, char *path);

static int walk(struct stack *st, long budget, visit_fn visit, void *ctx) {
    long seen = 0;
    int rc = WALK_NEXT;
    while (st->n && rc == WALK_NEXT) {
        struct frame f = st->v[--st->n];
        size_t n = 0;
        struct ent *ents = list_dir(f.path, &n);
        for (size_t i = 0; ents && i < n && rc == WALK_NEXT; i++) {
            if (++seen > budget) { rc = WALK_BUDGET; break; }
            char *p = path_join(f.path, ents[i].name);
            if (!p) { rc = WALK_NOMEM; break; }
            int v = visit(ctx, &f, &ents[i], p);
            if (v == WALK_DESCEND && push(st, p, f.level + 1) == 0) continue;
            free(p);
            if (v == WALK_DESCEND) rc = WALK_NOMEM;
            else if (v == WALK_STOP) rc = WALK_STOP;
        }
        if (ents) free_list(ents, n);
        free(f.path);
    }
    while (st->n) free(st->v[--st->n].path);
    free(st->v);
    st->v = NULL;
    return rc;
}

/* walk_matches: the walk gives exactly the recorded paths (NUL-separated), in order */
struct expect { const char *next, *end; int depth; };

static int expect_visit(void *ctx, const struct frame *dir, const struct ent *e, char *p) {
    struct expect *x = ctx;
    size_t pl = strlen(p);
    if (x->next >= x->end || (size_t)(x->end - x->next) < pl || memcmp(x->next, p, pl) != 0
        || (x->next + pl < x->end && x->next[pl] != 0))
        return WALK_STOP;
    x->next += pl + 1;
    if (dir->level + 1 < x->depth && !in_list(e->name, SKIP_DIRS) && strcmp(p, walk_skip) != 0
        && is_dir_nofollow(p, e->type))
        return WALK_DESCEND;
    return WALK_NEXT;
}

/* 0 when the walk of bwrap.RealFs from root gives exactly `expected` (NUL-separated) */
static int walk_matches(const char *root, int depth, long budget, const char *expected, const char *end) {
    struct stack st = {0};
    char *r0 = strdup(root);
    if (!r0 || push(&st, r0, 0) != 0) { free(r0); return -1; }
    struct expect x = {expected, end, depth};
    return walk(&st, budget, expect_visit, &x) == WALK_NEXT && x.next >= x.end ? 0 : -1;
}

/* ---- the plan file ------------------------------------------------------------ */

struct field { char tag[12]; const char *val; size_t len; };

static int next_field(const char **p, const char *end, struct field *f) {
    const char *sp = memchr(*p, ' ', (size_t)(end - *p));
    if (!sp || sp - *p >= (long)sizeof f->tag) return -1;
    memcpy(f->tag, *p, (size_t)(sp - *p)); f->tag[sp - *p] = 0;
    char *nl;
    unsigned long long len = strtoull(sp + 1, &nl, 10);
    if (*nl != '\n' || len > (unsigned long long)(end - nl - 1) || (size_t)(end - nl - 1) - len < 1) return -1;
    f->val = nl + 1; f->len = (size_t)len;
    if (f->val[f->len] != '\n') return -1;
    *p = f->val + f->len + 1;
    return 0;
}

static int eq(const struct field *f, const char *s, size_t n) { return f->len == n && memcmp(f->val, s, n) == 0; }
static int eqs(const struct field *f, const char *s) { return eq(f, s, strlen(s)); }
static char *dup_field(const struct field *f) {
    char *s = malloc(f->len + 1);
    if (s) { memcpy(s, f->val, f->len); s[f->len] = 0; }
    return s;
}

/* ---- placeholders (exec.Placeholders, same files and records) -------------- */

static int lock_users = -1, lock_mutex = -1;

static int take_locks(const char *lock_dir) {
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/placeholders.mutex", lock_dir);
    lock_mutex = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    snprintf(p, sizeof p, "%s/placeholders.users", lock_dir);
    lock_users = open(p, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (lock_mutex < 0 || lock_users < 0) return -1;
    if (flock(lock_mutex, LOCK_EX) != 0 || flock(lock_users, LOCK_SH) != 0) return -1;
    return 0;
}

static void drop_locks(void) {
    if (lock_mutex >= 0) close(lock_mutex);
    if (lock_users >= 0) close(lock_users);
    lock_mutex = lock_users = -1;
}

/* append the record "<kind><path>\0" (Placeholders.create); -1 when out of memory */
static int add_record(char **rec, size_t *reclen, char kind, const char *path) {
    size_t l = strlen(path);
    char *nr = realloc(*rec, *reclen + l + 2);
    if (!nr) return -1;
    *rec = nr;
    nr[(*reclen)++] = kind;
    memcpy(nr + *reclen, path, l + 1);
    *reclen += l + 1;
    return 0;
}

/* 0 made (or existed), 1 impossible (not writable by this user), -1 error */
static int make_placeholder(const char *path, char kind, char **rec, size_t *reclen) {
    char root[PATH_MAX];
    snprintf(root, sizeof root, "%s", path);
    char *cut = strrchr(root, '/');
    if (!cut) return -1;
    if (cut == root) cut[1] = 0; else *cut = 0;
    for (;;) {
        char *b = strrchr(root, '/');
        if (!b || strcmp(b + 1, ".git") != 0) break;
        if (b == root) b[1] = 0; else *b = 0;
    }
    char missing[16][PATH_MAX];
    int nm = 0;
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", path);
    for (;;) {
        char *s = strrchr(parent, '/');
        if (!s) return -1;
        if (s == parent) s[1] = 0; else *s = 0;
        struct stat st;
        if (strcmp(parent, root) == 0 || lstat(parent, &st) == 0) break;
        if (nm == 16) return -1;
        snprintf(missing[nm++], PATH_MAX, "%s", parent);
    }
    int made = 0;
    for (int i = nm - 1; i >= 0; i--) {
        if (mkdir(missing[i], 0755) != 0) goto fail;
        if (add_record(rec, reclen, 'd', missing[i]) != 0) return -1;
        made++;
    }
    int rc = kind == 'd' ? mkdir(path, 0755)
                         : open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (rc < 0) {
        if (errno == EEXIST) return 0;
        goto fail;
    }
    if (kind != 'd') close(rc);
    return add_record(rec, reclen, kind, path);
fail:
    if ((errno == EPERM || errno == EACCES || errno == EROFS) && !made) return 1;
    return -1;
}

/* exec.reap_stuck: kill this user's bwraps running our start gate whose parent is gone */
static void reap_stuck(void) {
    char stamp[PATH_MAX + 16];
    snprintf(stamp, sizeof stamp, "%s/reaped", walk_skip);
    const char *ev = getenv("AGENT_SANDBOX_REAP_EVERY");
    double every = ev ? atof(ev) : 30.0;
    struct stat st;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (stat(stamp, &st) == 0 && (double)(now.tv_sec - st.st_mtim.tv_sec) < every) return;
    int fd = open(stamp, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return;
    futimens(fd, NULL);
    close(fd);
    DIR *proc = opendir("/proc");
    if (!proc) return;
    struct dirent *e;
    uid_t uid = getuid();
    while ((e = readdir(proc))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        char p[300], buf[4096];
        snprintf(p, sizeof p, "/proc/%s", e->d_name);
        if (stat(p, &st) != 0 || st.st_uid != uid) continue;
        snprintf(p, sizeof p, "/proc/%s/stat", e->d_name);
        int f = open(p, O_RDONLY | O_CLOEXEC);
        if (f < 0) continue;
        ssize_t n = read(f, buf, sizeof buf - 1);
        close(f);
        if (n <= 0) continue;
        buf[n] = 0;
        char *rp = strrchr(buf, ')');
        char state;
        int ppid;
        if (!rp || sscanf(rp + 1, " %c %d", &state, &ppid) != 2 || ppid != 1) continue;
        snprintf(p, sizeof p, "/proc/%s/cmdline", e->d_name);
        f = open(p, O_RDONLY | O_CLOEXEC);
        if (f < 0) continue;
        n = read(f, buf, sizeof buf - 1);
        close(f);
        if (n <= 0) continue;
        buf[n] = 0;
        size_t l0 = strlen(buf);
        if (l0 < 6 || strcmp(buf + l0 - 6, "/bwrap") != 0) continue;
        int marked = 0;
        for (char *a = buf; a < buf + n && !marked; a += strlen(a) + 1)
            marked = strcmp(a, "__gate") == 0 || strcmp(a, "sandbox-gate") == 0;
        if (marked) kill(atoi(e->d_name), SIGKILL);
    }
    closedir(proc);
}

/* sweep.owe / sweep.settle: a marker for this run until its sweep is done */
static char owed_path[PATH_MAX + 64];
static int keep_owed;
static const char *settle_python, *settle_audit;

static void owe(double since, char **roots, size_t nroots, char **skip, size_t nskip) {
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/owed", walk_skip);
    mkdir(dir, 0700);
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    snprintf(owed_path, sizeof owed_path, "%s/%d.%lld%09ld", dir, (int)getpid(),
             (long long)t.tv_sec, t.tv_nsec);
    int fd = open(owed_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) { owed_path[0] = 0; return; }
    char head[64];
    int hl = snprintf(head, sizeof head, "agent-sandbox-owed 1%c%.6f", 0, since);
    write_all(fd, head, (size_t)hl);
    for (size_t k = 0; k < nroots; k++) { write_all(fd, "\0R", 2); write_all(fd, roots[k], strlen(roots[k])); }
    for (size_t k = 0; k < nskip; k++) { write_all(fd, "\0S", 2); write_all(fd, skip[k], strlen(skip[k])); }
    close(fd);
}

static void settle_owed(void) {
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/owed", walk_skip);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    int any = 0;
    while (!any && (e = readdir(d))) any = e->d_name[0] != '.';
    closedir(d);
    if (!any || !settle_python) return;
    pid_t s = fork();
    if (s == 0) {
        if (settle_audit && *settle_audit) setenv("AGENT_SANDBOX_AUDIT_DIR", settle_audit, 1);
        execl(settle_python, settle_python, "-m", "agent_sandbox.runtime.sweep", "--owed",
              walk_skip, (char *)NULL);
        _exit(1);
    }
    if (s > 0) waitpid(s, NULL, 0);
}

static void cleanup_placeholders(void) {
    if (owed_path[0] && !keep_owed) unlink(owed_path);
    owed_path[0] = 0;
    if (lock_users < 0) return;
    if (flock(lock_mutex, LOCK_EX) == 0 && flock(lock_users, LOCK_EX | LOCK_NB) == 0) {
        size_t n = 0, cap = 4096;
        char *data = malloc(cap);
        lseek(lock_users, 0, SEEK_SET);
        for (;;) {
            if (!data) break;
            if (n == cap) { cap *= 2; char *d = realloc(data, cap); if (!d) break; data = d; }
            ssize_t r = read(lock_users, data + n, cap - n);
            if (r <= 0) break;
            n += (size_t)r;
        }
        if (data) {
            /* records are "<kind><path>\0", removed newest first */
            size_t end = n;
            while (end > 0) {
                size_t start = end - 1;
                while (start > 0 && data[start - 1] != 0) start--;
                char *rec = data + start;
                if (end - start > 1 && data[end - 1] == 0) {
                    if (rec[0] == 'd') rmdir(rec + 1);
                    else if (rec[0] == 'f') {
                        struct stat st;
                        if (lstat(rec + 1, &st) == 0 && st.st_size == 0) unlink(rec + 1);
                    }
                }
                end = start;
            }
            free(data);
            if (ftruncate(lock_users, 0) != 0) { /* the next cleanup retries */ }
        }
        reap_stuck();
        settle_owed();
    }
    drop_locks();
}

/* ---- the sweep: anything written under a protected name deep in a root? --- */

static const char *PROTECTED[] = {".bashrc", ".bash_profile", ".bash_login", ".profile", ".zshrc",
    ".zshenv", ".zprofile", ".zlogin", ".gitconfig", ".gitmodules", ".mcp.json", ".git", ".claude",
    ".codex", ".cursor", ".gemini", ".vscode", ".idea", ".sandbox", "fish", "git", NULL};

static double ctime_of(const struct stat *st) { return (double)st->st_ctim.tv_sec + st->st_ctim.tv_nsec / 1e9; }

static int newer_visit(void *ctx, const struct frame *dir, const struct ent *e, char *p) {
    (void)dir; (void)e;
    struct stat s;
    if (lstat(p, &s) != 0) return WALK_NEXT;
    if (ctime_of(&s) >= *(double *)ctx) return WALK_STOP;
    return S_ISDIR(s.st_mode) ? WALK_DESCEND : WALK_NEXT;
}

/* anything below path written at or after since (as far as sweep._changed_inside looks) */
static int written_inside(const char *path, double since) {
    struct stack st = {0};
    char *p0 = strdup(path);
    if (!p0 || push(&st, p0, 0) != 0) { free(p0); return 1; }
    int rc = walk(&st, INSIDE_LIMIT, newer_visit, &since);
    return rc == WALK_STOP || rc == WALK_NOMEM;
}

static int suspicious(const char *path, const char *name, double since) {
    struct stat st;
    if (lstat(path, &st) != 0) return 0;
    if (ctime_of(&st) >= since) return 1;
    if (!S_ISDIR(st.st_mode)) return 0;
    if (strcmp(name, ".git") == 0) {
        char *c = path_join(path, "config"), *h = path_join(path, "hooks");
        int hit = 0;
        struct stat s;
        if (c && lstat(c, &s) == 0 && ctime_of(&s) >= since) hit = 1;
        if (!hit && h && lstat(h, &s) == 0)
            hit = ctime_of(&s) >= since || (S_ISDIR(s.st_mode) && written_inside(h, since));
        free(c); free(h);
        return hit;
    }
    return written_inside(path, since);
}

struct sweep_check { char **skip; size_t nskip; double since; };

static int sweep_visit(void *ctx, const struct frame *dir, const struct ent *e, char *p) {
    struct sweep_check *c = ctx;
    for (size_t k = 0; k < c->nskip; k++)
        if (strcmp(c->skip[k], p) == 0) return WALK_NEXT;
    if (in_list(e->name, PROTECTED)) {
        const char *base = strrchr(dir->path, '/');
        if (strcmp(e->name, "fish") != 0 || (base && strcmp(base + 1, ".config") == 0)) {
            /* level 1: a root's top, covered by placeholders and mounts */
            return dir->level != 1 && suspicious(p, e->name, c->since) ? WALK_STOP : WALK_NEXT;
        }
    }
    return is_dir_nofollow(p, e->type) ? WALK_DESCEND : WALK_NEXT;
}

/* 1 when the Python sweep must run (something to look at, or the walk ran out) */
static int needs_sweep(char **roots, size_t nroots, char **skip, size_t nskip, double since) {
    struct stack st = {0};
    for (size_t i = 0; i < nroots; i++) {
        struct stat s;
        char *r = NULL;
        if (stat(roots[i], &s) == 0 && S_ISDIR(s.st_mode)
            && (!(r = strdup(roots[i])) || push(&st, r, 1) != 0)) {
            free(r);
            while (st.n) free(st.v[--st.n].path);
            free(st.v);
            return 1;
        }
    }
    struct sweep_check c = {skip, nskip, since};
    return walk(&st, SWEEP_BUDGET, sweep_visit, &c) != WALK_NEXT;
}

/* ---- the proxy ports inside the sandbox's network namespace ----------------- */

static int listen_on(int port) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return -1;
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(s, IPPROTO_IP, IP_FREEBIND, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 128) != 0) { close(s); return -1; }
    return s;
}

static int open_listeners(pid_t pid, int out[2]) {
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/ns/net", (int)pid);
    int target = open(p, O_RDONLY | O_CLOEXEC);
    if (target < 0) return -1;
    if (geteuid() == 0) {
        int own = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (own >= 0 && setns(target, CLONE_NEWNET) == 0) {
            out[0] = listen_on(HTTP_PORT);
            out[1] = listen_on(SOCKS_PORT);
            if (setns(own, CLONE_NEWNET) != 0) _exit(FAILED); /* never stay inside */
            close(own); close(target);
            return out[0] >= 0 && out[1] >= 0 ? 0 : -1;
        }
        if (own >= 0) close(own);
    }
    /* a child joins the sandbox's user namespace first (its owner has every capability there) */
    snprintf(p, sizeof p, "/proc/%d/ns/user", (int)pid);
    int userns = open(p, O_RDONLY | O_CLOEXEC);
    int sv[2];
    if (userns < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) { close(target); return -1; }
    pid_t kid = fork();
    if (kid == 0) {
        int l[2] = {-1, -1};
        if (setns(userns, CLONE_NEWUSER) == 0 && setns(target, CLONE_NEWNET) == 0) {
            l[0] = listen_on(HTTP_PORT);
            l[1] = listen_on(SOCKS_PORT);
        }
        char ok = (l[0] >= 0 && l[1] >= 0) ? 'k' : 'e';
        struct iovec iov = {&ok, 1};
        union { char buf[CMSG_SPACE(sizeof(int) * 2)]; struct cmsghdr a; } u;
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
        if (ok == 'k') {
            m.msg_control = u.buf; m.msg_controllen = sizeof u.buf;
            struct cmsghdr *c = CMSG_FIRSTHDR(&m);
            c->cmsg_level = SOL_SOCKET; c->cmsg_type = SCM_RIGHTS; c->cmsg_len = CMSG_LEN(sizeof(int) * 2);
            memcpy(CMSG_DATA(c), l, sizeof l);
        }
        _exit(sendmsg(sv[1], &m, 0) == 1 && ok == 'k' ? 0 : 1);
    }
    close(userns); close(target); close(sv[1]);
    int rc = -1;
    if (kid > 0) {
        char ok = 0;
        struct iovec iov = {&ok, 1};
        union { char buf[CMSG_SPACE(sizeof(int) * 2)]; struct cmsghdr a; } u;
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
        if (recvmsg(sv[0], &m, MSG_CMSG_CLOEXEC) == 1 && ok == 'k') {
            struct cmsghdr *c = CMSG_FIRSTHDR(&m);
            if (c && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int) * 2)) {
                memcpy(out, CMSG_DATA(c), sizeof(int) * 2);
                rc = 0;
            }
        }
        waitpid(kid, NULL, 0);
    }
    close(sv[0]);
    return rc;
}

/* ---- signals ------------------------------------------------------------------ */

static int sigpipe_w = -1;
static const int FORWARDED[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT, 0};

static void on_signal(int sig) {
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (write(sigpipe_w, &b, 1) < 0) { /* the pipe is full: the signal is dropped */ }
    errno = saved;
}

static void forward(pid_t pid1, int sig) {
    char p[96];
    snprintf(p, sizeof p, "/proc/%d/task/%d/children", (int)pid1, (int)pid1);
    FILE *f = fopen(p, "re");
    int sent = 0;
    if (f) {
        int child;
        while (fscanf(f, "%d", &child) == 1) { kill(child, sig); sent = 1; }
        fclose(f);
    }
    if (!sent) kill(pid1, sig);
}

/* ---- main ----------------------------------------------------------------------- */

struct plan {
    int new_session;
    char **argv; size_t nargv;
    char **env_add; size_t nenv;
    char **ph; size_t nph;           /* "<kind><path>" */
    char **roots; size_t nroots;
    char **mounts; size_t nmounts;
    char **notes; size_t nnotes;
    const char *seccomp; size_t seccomp_len;
    char *python, *audit;
};

static int append(char ***v, size_t *n, char *s) {
    char **nv = realloc(*v, (*n + 2) * sizeof *nv);
    if (!nv || !s) return -1;
    nv[(*n)++] = s; nv[*n] = NULL; *v = nv;
    return 0;
}


/* `sandbox __gate READY GATE -- CMD...`: the start gate inside the sandbox (bwrap.gated).
 * Say "ready" once bwrap's setup is done, then run CMD only on the word "go" from the
 * caller; end-of-file (the caller died) or anything else ends the sandbox first. */
static int gate_main(int argc, char **argv) {
    if (argc < 6 || strcmp(argv[4], "--") != 0) return FAILED;
    int ready = atoi(argv[2]), gate = atoi(argv[3]);
    if (write(ready, "ready\n", 6) != 6) return FAILED;
    close(ready);
    char line[4];
    size_t n = 0;
    while (n < sizeof line) {
        ssize_t r = read(gate, line + n, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r != 1) return FAILED;
        if (line[n++] == '\n') break;
    }
    if (n != 3 || memcmp(line, "go\n", 3) != 0) return FAILED;
    close(gate);
    execvp(argv[5], argv + 5);
    int e = errno;
    fprintf(stderr, "sandbox: %s: %s\n", argv[5], e == ENOENT ? "command not found" : strerror(e));
    return e == ENOENT ? 127 : 126;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "__gate") == 0) return gate_main(argc, argv);
    orig_argv = argv;
    /* a pipe to a bwrap that already ended must be an error here, not our death (the
       placeholders would stay); the sandbox gets the default back */
    signal(SIGPIPE, SIG_IGN);
    char exe[PATH_MAX];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (el <= 0) { fprintf(stderr, "sandbox: cannot find its own program\n"); return FAILED; }
    exe[el] = 0;
    snprintf(self_dir, sizeof self_dir, "%s", exe);
    *strrchr(self_dir, '/') = 0;

    if (argc < 4 || strcmp(argv[1], "exec") != 0 || getenv("AGENT_SANDBOX_NO_PLAN_CACHE")) fallback(NULL);
    const char *settings = NULL, *cwd_opt = NULL;
    int i = 2;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) { i++; break; }
        if (strcmp(argv[i], "--settings") == 0 && i + 1 < argc) settings = argv[++i];
        else if (strncmp(argv[i], "--settings=", 11) == 0) settings = argv[i] + 11;
        else if (strcmp(argv[i], "--cwd") == 0 && i + 1 < argc) cwd_opt = argv[++i];
        else if (strncmp(argv[i], "--cwd=", 6) == 0) cwd_opt = argv[i] + 6;
        else fallback(NULL);
    }
    if ((settings && !*settings) || i >= argc || strcmp(argv[i - 1], "--") != 0) fallback(NULL);

    /* the inputs */
    uid_t uid = getuid();
    char lock_dir[PATH_MAX];
    const char *ld = getenv("AGENT_SANDBOX_LOCK_DIR");
    if (ld && *ld) snprintf(lock_dir, sizeof lock_dir, "%s", ld);
    else {
        const char *rt = getenv("XDG_RUNTIME_DIR");
        snprintf(lock_dir, sizeof lock_dir, "%s/agent-sandbox-%u", rt && *rt ? rt : "/tmp", (unsigned)uid);
    }
    walk_skip = lock_dir;
    char plans[PATH_MAX + 8];
    snprintf(plans, sizeof plans, "%s/plans", lock_dir);
    if (!owned_dir(lock_dir) || !owned_dir(plans)) fallback("no plan folder owned by this user");
    char home[PATH_MAX], cwd[PATH_MAX], sreal[PATH_MAX], tmp[PATH_MAX];
    const char *h = getenv("HOME");
    if (!(h && h[0] == '/')) { struct passwd *pw = getpwuid(uid); h = pw ? pw->pw_dir : NULL; }
    if (!h || !realpath(h, home)) fallback(NULL);
    if (!cwd_opt) { if (!getcwd(tmp, sizeof tmp)) fallback(NULL); cwd_opt = tmp; }
    struct stat cst;
    if (!realpath(cwd_opt, cwd) || stat(cwd, &cst) != 0 || !S_ISDIR(cst.st_mode)) fallback(NULL);
    char deflt[PATH_MAX + 32];
    if (!settings) { /* settings.default_path: the host's, else the user's */
        struct stat sst;
        if (stat(SYSTEM_SETTINGS, &sst) == 0 && S_ISREG(sst.st_mode)) settings = SYSTEM_SETTINGS;
        else {
            snprintf(deflt, sizeof deflt, "%s/.srt-settings.json", home);
            if (stat(deflt, &sst) != 0 || !S_ISREG(sst.st_mode)) fallback("no settings file");
            settings = deflt;
        }
    }
    if (!realpath(settings, sreal)) fallback(NULL);

    char key[PATH_MAX * 4];
    int kl = snprintf(key, sizeof key, "%u%c%s%c%s%c%s", (unsigned)uid, 0, home, 0, cwd, 0, sreal);
    uint64_t hsh = 0xcbf29ce484222325ULL;
    for (int k = 0; k < kl; k++) { hsh ^= (unsigned char)key[k]; hsh *= 0x100000001b3ULL; }
    char planfile[PATH_MAX + 32];
    snprintf(planfile, sizeof planfile, "%s/%016llx", plans, (unsigned long long)hsh);
    size_t flen = 0;
    char *file = read_file(planfile, &flen, 1);
    if (!file) fallback("no plan file for these inputs");
    const char *p = file, *end = file + flen;
    struct field f = {{0}, NULL, 0};
    struct plan pl = {0};
    pl.new_session = -1;
    char num[32];
    int ok = 0, locked = 0;

    /* check every recorded input, in order */
    while (next_field(&p, end, &f) == 0) {
        if (!strcmp(f.tag, "V")) { if (!eqs(&f, VERSION)) break; }
        else if (!strcmp(f.tag, "uid")) { snprintf(num, sizeof num, "%u", (unsigned)uid); if (!eqs(&f, num)) break; }
        else if (!strcmp(f.tag, "euid")) { snprintf(num, sizeof num, "%u", (unsigned)geteuid()); if (!eqs(&f, num)) break; }
        else if (!strcmp(f.tag, "E")) {
            const char *nul = memchr(f.val, 0, f.len);
            char name[64];
            size_t nl = nul ? (size_t)(nul - f.val) : f.len;
            if (nl >= sizeof name) break;
            memcpy(name, f.val, nl); name[nl] = 0;
            const char *v = getenv(name);
            if (!nul) { if (v) break; }
            else if (!v || !eq(&(struct field){.val = nul + 1, .len = f.len - nl - 1}, v, strlen(v))) break;
        }
        else if (!strcmp(f.tag, "cwd")) { if (!eqs(&f, cwd)) break; }
        else if (!strcmp(f.tag, "sfile")) { if (!eqs(&f, sreal)) break; }
        else if (!strcmp(f.tag, "sbytes")) {
            size_t sl = 0;
            char *sb = read_file(sreal, &sl, 0);
            int same = sb && eq(&f, sb, sl);
            free(sb);
            if (!same) break;
        }
        else if (!strcmp(f.tag, "profile")) {
            size_t sl = 0;
            char *sb = read_file(PROFILE, &sl, 0);
            int same;
            if (!sb) same = errno == ENOENT && eqs(&f, "-");
            else same = f.len == sl + 1 && f.val[0] == '+' && memcmp(f.val + 1, sb, sl) == 0;
            free(sb);
            if (!same) break;
        }
        else if (!strcmp(f.tag, "K") || !strcmp(f.tag, "R") || !strcmp(f.tag, "W")) {
            if (!locked) { if (take_locks(lock_dir) != 0) break; locked = 1; }
            const char *nul = memchr(f.val, 0, f.len);
            if (!nul) break;
            char path[PATH_MAX];
            size_t nl = (size_t)(nul - f.val);
            if (nl >= sizeof path) break;
            memcpy(path, f.val, nl); path[nl] = 0;
            const char *ans = nul + 1;
            size_t al = f.len - nl - 1;
            if (f.tag[0] == 'K') {
                struct stat s;
                const char *k = stat(path, &s) != 0 ? "-" : S_ISDIR(s.st_mode) ? "d" : "f";
                if (al != 1 || ans[0] != k[0]) break;
            } else if (f.tag[0] == 'R') {
                char out[PATH_MAX * 2];
                if (py_realpath(path, out, sizeof out) != 0 || strlen(out) != al || memcmp(out, ans, al) != 0) break;
            } else {
                const char *lend = f.val + f.len;
                const char *z1 = memchr(ans, 0, (size_t)(lend - ans));
                if (!z1) break;
                const char *z2 = memchr(z1 + 1, 0, (size_t)(lend - z1 - 1));
                char nums[2][24];
                size_t l1 = (size_t)(z1 - ans), l2 = (size_t)((z2 ? z2 : lend) - z1 - 1);
                if (l1 == 0 || l2 == 0 || l1 >= sizeof nums[0] || l2 >= sizeof nums[1]) break;
                memcpy(nums[0], ans, l1); nums[0][l1] = 0;
                memcpy(nums[1], z1 + 1, l2); nums[1][l2] = 0;
                char *e1, *e2;
                long depth = strtol(nums[0], &e1, 10), budget = strtol(nums[1], &e2, 10);
                if (*e1 || *e2) break;
                const char *list = z2 ? z2 + 1 : lend;
                if (walk_matches(path, (int)depth, budget, list, lend) != 0) break;
            }
        }
        else if (!strcmp(f.tag, "I")) pl.new_session = atoi(f.val);
        else if (!strcmp(f.tag, "A")) { if (append(&pl.argv, &pl.nargv, dup_field(&f))) break; }
        else if (!strcmp(f.tag, "X")) { if (append(&pl.env_add, &pl.nenv, dup_field(&f))) break; }
        else if (!strcmp(f.tag, "P")) { if (append(&pl.ph, &pl.nph, dup_field(&f))) break; }
        else if (!strcmp(f.tag, "O")) { if (append(&pl.roots, &pl.nroots, dup_field(&f))) break; }
        else if (!strcmp(f.tag, "M")) { if (append(&pl.mounts, &pl.nmounts, dup_field(&f))) break; }
        else if (!strcmp(f.tag, "N")) { if (append(&pl.notes, &pl.nnotes, dup_field(&f))) break; }
        else if (!strcmp(f.tag, "S")) { pl.seccomp = f.val; pl.seccomp_len = f.len; }
        else if (!strcmp(f.tag, "Y")) pl.python = dup_field(&f);
        else if (!strcmp(f.tag, "D")) pl.audit = dup_field(&f);
        else if (!strcmp(f.tag, "Z")) { ok = p == end && eqs(&f, "end"); break; }
        else break;
    }
    if (!ok || !locked || !pl.nargv || !pl.seccomp_len || !pl.python || pl.new_session < 1
        || !pl.audit || access(pl.python, X_OK) != 0 || (size_t)pl.new_session >= pl.nargv || strcmp(pl.argv[pl.new_session], "--new-session") != 0) {
        drop_locks();
        fallback(f.tag[0] ? f.tag : "malformed plan file");
    }

    if (getenv("AGENT_SANDBOX_TRACE")) fprintf(stderr, "sandbox: plan replayed: %s\n", planfile);

    /* placeholders, still under the lock */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double started = (double)ts.tv_sec + ts.tv_nsec / 1e9;
    char *rec = NULL;
    size_t reclen = 0;
    int impossible = 0;
    char empty[PATH_MAX] = ""; /* an empty placeholder file made in this run (Placeholders.create) */
    for (size_t k = 0; k < pl.nph; k++) {
        const char *path = pl.ph[k] + 1;
        char kind = pl.ph[k][0];
        const char *slash = strrchr(path, '/'), *eslash = strrchr(empty, '/');
        if (kind == 'f' && *empty && slash && eslash && slash - path == eslash - empty
            && strncmp(path, empty, (size_t)(slash - path)) == 0) {
            /* another name for the same empty file: a directory entry, no new inode */
            if (link(empty, path) == 0) {
                if (add_record(&rec, &reclen, 'f', path) != 0) { impossible = 1; break; }
                continue;
            }
            if (errno == EEXIST) continue;
        }
        size_t before = reclen;
        int r = make_placeholder(path, kind, &rec, &reclen);
        if (r != 0) { impossible = 1; break; }
        if (kind == 'f' && reclen > before && strcmp(rec + reclen - strlen(path) - 1, path) == 0)
            snprintf(empty, sizeof empty, "%s", path);
    }
    if (rec && reclen) write_all(lock_users, rec, reclen);
    free(rec);
    if (impossible) { cleanup_placeholders(); fallback("a placeholder cannot be created"); }
    settle_python = pl.python;
    settle_audit = pl.audit;
    owe(started, pl.roots, pl.nroots, pl.mounts, pl.nmounts);
    flock(lock_mutex, LOCK_UN);

    /* bwrap, held at --block-fd */
    int info[2], block[2], gate[2], ready[2];
    if (pipe2(info, O_CLOEXEC) || pipe2(block, O_CLOEXEC) || pipe2(gate, O_CLOEXEC) || pipe2(ready, O_CLOEXEC)) {
        cleanup_placeholders(); die("cannot create pipes");
    }
    int sfd = memfd_create("agent-sandbox-seccomp", MFD_CLOEXEC);
    if (sfd < 0) { cleanup_placeholders(); die("cannot create the seccomp program"); }
    write_all(sfd, pl.seccomp, pl.seccomp_len);
    lseek(sfd, 0, SEEK_SET);
    int interactive = isatty(0);
    char **bargv = calloc(pl.nargv + (size_t)(argc - i) + 1, sizeof *bargv);
    if (!bargv) { cleanup_placeholders(); die("out of memory"); }
    size_t nb = 0;
    for (size_t k = 0; k < pl.nargv; k++)
        if (!(interactive && (int)k == pl.new_session)) bargv[nb++] = pl.argv[k];
    for (int k = i; k < argc; k++) bargv[nb++] = argv[k];
    /* the environment: ours, with the proxy variables set */
    size_t ne = 0;
    while (environ[ne]) ne++;
    char **envp = calloc(ne + pl.nenv + 1, sizeof *envp);
    if (!envp) { cleanup_placeholders(); die("out of memory"); }
    size_t nv = 0;
    for (size_t k = 0; k < ne; k++) {
        const char *eqp = strchr(environ[k], '=');
        size_t kl2 = eqp ? (size_t)(eqp - environ[k]) : strlen(environ[k]);
        int replaced = 0;
        for (size_t a = 0; a < pl.nenv && !replaced; a++)
            replaced = strncmp(pl.env_add[a], environ[k], kl2) == 0 && pl.env_add[a][kl2] == '=';
        if (!replaced) envp[nv++] = environ[k];
    }
    for (size_t a = 0; a < pl.nenv; a++) envp[nv++] = pl.env_add[a];

    pid_t child = fork();
    if (child < 0) { cleanup_placeholders(); die("cannot fork"); }
    if (child == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        if (dup2(sfd, FD_SECCOMP) < 0 || dup2(info[1], FD_INFO) < 0 || dup2(block[0], FD_BLOCK) < 0
            || dup2(gate[0], FD_GATE) < 0 || dup2(ready[1], FD_READY) < 0) _exit(FAILED);
        syscall(SYS_close_range, 3, FD_SECCOMP - 1, 0);
        syscall(SYS_close_range, FD_READY + 1, ~0U, 0);
        execve(bargv[0], bargv, envp);
        fprintf(stderr, "sandbox exec: the sandbox could not start: cannot start bwrap: %s\n", strerror(errno));
        _exit(FAILED);
    }
    close(info[1]); close(block[0]); close(gate[0]); close(ready[1]); close(sfd);
    int pidfd = (int)syscall(SYS_pidfd_open, child, 0);

    char buf[512];
    size_t bl = 0;
    for (;;) {
        ssize_t r = read(info[0], buf + bl, sizeof buf - 1 - bl);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        bl += (size_t)r;
        if (bl == sizeof buf - 1) break;
    }
    buf[bl] = 0;
    close(info[0]);
    char *cp = strstr(buf, "\"child-pid\"");
    pid_t pid1 = 0;
    if (cp && (cp = strchr(cp, ':'))) pid1 = (pid_t)atoi(cp + 1);
    int lis[2] = {-1, -1};
    const char *failure = NULL;
    if (pid1 <= 0) failure = "bubblewrap could not create the sandbox (see its message above)";
    else if (open_listeners(pid1, lis) != 0) failure = "cannot open the proxy ports in the sandbox";
    else {
        write_all(block[1], "1", 1);
        char line[16] = {0};
        size_t ll = 0;
        while (ll < sizeof line - 1) {
            ssize_t r = read(ready[0], line + ll, 1);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0 || line[ll++] == '\n') break;
        }
        if (strcmp(line, "ready\n") != 0) failure = "the sandbox could not start the command (see bwrap's message above)";
        else write_all(gate[1], "go\n", 3);
    }
    close(block[1]); close(ready[0]); close(gate[1]);
    if (failure) {
        /* The command has not started (it waits at the gate): end this sandbox and
           let the Python runtime try from the start. It plans afresh, and if the
           sandbox still cannot start it names the cause and the remedy (user
           namespaces, AppArmor) where this program could only say that it failed. */
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        if (lis[0] >= 0) { close(lis[0]); close(lis[1]); }
        close(pidfd);
        cleanup_placeholders();
        fallback(failure);
    }

    /* wait: forward signals, start the proxy on the first connection */
    int sp[2];
    if (pipe2(sp, O_CLOEXEC | O_NONBLOCK) != 0) sp[0] = sp[1] = -1;
    sigpipe_w = sp[1];
    for (int k = 0; FORWARDED[k]; k++) {
        struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
        sigemptyset(&sa.sa_mask);
        sigaction(FORWARDED[k], &sa, NULL);
    }
    pid_t proxy = 0;
    int status = 0;
    for (;;) {
        struct pollfd fds[4] = {{pidfd, POLLIN, 0}, {sp[0], POLLIN, 0}, {lis[0], POLLIN, 0}, {lis[1], POLLIN, 0}};
        nfds_t nf = lis[0] >= 0 ? 4 : 2;
        if (poll(fds, nf, pidfd >= 0 ? -1 : 50) < 0 && errno != EINTR) break;
        if (fds[1].revents & POLLIN) {
            unsigned char sig;
            while (read(sp[0], &sig, 1) == 1) forward(pid1, sig);
        }
        if (pidfd < 0 || (fds[0].revents & POLLIN)) {
            pid_t w = waitpid(child, &status, pidfd < 0 ? WNOHANG : 0);
            if (w == child) break;
            if (w < 0 && errno != EINTR) break;
        }
        if (nf == 4 && ((fds[2].revents | fds[3].revents) & POLLIN)) {
            proxy = fork();
            if (proxy == 0) {
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
                /* the command's streams are not the proxy's: only its errors go to stderr */
                if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0) _exit(1);
                if (dup2(lis[0], 3) < 0 || dup2(lis[1], 4) < 0) _exit(1);
                syscall(SYS_close_range, 5, ~0U, 0);
                char session[32];
                snprintf(session, sizeof session, "exec-%d", (int)getppid());
                char *pargv[] = {pl.python, "-m", "agent_sandbox.runtime.proxy", "--settings", sreal,
                                 "--http", "fd:3", "--socks", "fd:4", "--session", session,
                                 *pl.audit ? "--audit-dir" : NULL, pl.audit, NULL};
                execv(pl.python, pargv);
                _exit(1);
            }
            close(lis[0]); close(lis[1]);
            lis[0] = lis[1] = -1;
        }
    }
    for (int k = 0; FORWARDED[k]; k++) signal(FORWARDED[k], SIG_DFL);
    if (proxy > 0) { kill(proxy, SIGTERM); waitpid(proxy, NULL, 0); }
    if (lis[0] >= 0) { close(lis[0]); close(lis[1]); }

    /* after the command: the sweep, then our placeholders */
    if (needs_sweep(pl.roots, pl.nroots, pl.mounts, pl.nmounts, started - 0.05)) {
        pid_t s = fork();
        if (s == 0) {
            char since[64];
            snprintf(since, sizeof since, "%.6f", started);
            char **sargv = calloc(8 + 2 * (pl.nroots + pl.nmounts), sizeof *sargv);
            if (!sargv) _exit(1);
            size_t n = 0;
            sargv[n++] = pl.python; sargv[n++] = "-m"; sargv[n++] = "agent_sandbox.runtime.sweep";
            sargv[n++] = "--since"; sargv[n++] = since;
            for (size_t k = 0; k < pl.nroots; k++) { sargv[n++] = "--root"; sargv[n++] = pl.roots[k]; }
            for (size_t k = 0; k < pl.nmounts; k++) { sargv[n++] = "--skip"; sargv[n++] = pl.mounts[k]; }
            if (*pl.audit) setenv("AGENT_SANDBOX_AUDIT_DIR", pl.audit, 1);
            execv(pl.python, sargv);
            _exit(1);
        }
        int ss = -1;
        if (s > 0) waitpid(s, &ss, 0);
        if (!(WIFEXITED(ss) && WEXITSTATUS(ss) == 0)) {
            keep_owed = 1; /* not swept: the next run to finish does it (sweep.settle) */
            fprintf(stderr, "sandbox: warning: the check for protected paths after the command "
                            "failed; the next run will do it\n");
        }
    }
    cleanup_placeholders();
    for (size_t k = 0; k < pl.nnotes; k++) fputs(pl.notes[k], stderr);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return FAILED;
}
