#include "outpath.h"
#include "errorf.h"
#include "plan.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* The directory part of path ("." when there is none), without trailing slashes. */
static void parent_of(const char *path, char *buf, size_t n) {
    snprintf(buf, n, "%s", path);
    size_t len = strlen(buf);
    while (len > 1 && buf[len - 1] == '/') buf[--len] = 0;
    char *s = strrchr(buf, '/');
    if (!s) snprintf(buf, n, ".");
    else if (s == buf) buf[1] = 0;
    else *s = 0;
}

static int make_dirs(const char *flag, const char *path, const char *dir, char *err, size_t n) {
    char tmp[4096];
    if (strlen(dir) >= sizeof tmp) return errorf(err, n, "%s %s: the path is too long", flag, path);
    strcpy(tmp, dir);
    for (char *p = tmp + 1;; p++) {
        if (*p && *p != '/') continue;
        char c = *p;
        *p = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return errorf(err, n, "%s %s: cannot create the directory %s: %s", flag, path, tmp, strerror(errno));
        *p = c;
        if (!c) break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return errorf(err, n, "%s %s: %s is not a directory", flag, path, dir);
    return 0;
}

/* Whether dir takes a new file: one is made and removed again (permission
 * bits alone do not say, for root or on a read-only mount). */
static int probe_write(const char *flag, const char *path, const char *dir, char *err, size_t n) {
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.zinf-probe.%d", dir, (int)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return errorf(err, n, "%s %s: cannot write in %s: %s", flag, path, dir, strerror(errno));
    close(fd);
    unlink(probe);
    return 0;
}

int outpath_prepare_file(const char *flag, const char *path, bool refuse_existing, char *err, size_t n) {
    if (!path || !*path) return errorf(err, n, "%s needs a file name", flag);
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return errorf(err, n, "%s %s is a directory: %s names a file", flag, path, flag);
        if (refuse_existing)
            return errorf(err, n, "%s %s already exists: zinfrun does not write over it (remove it or choose another name)", flag, path);
    }
    char dir[4096];
    parent_of(path, dir, sizeof dir);
    if (make_dirs(flag, path, dir, err, n)) return -1;
    return probe_write(flag, path, dir, err, n);
}

int outpath_prepare_dir(const char *flag, const char *dir, char *err, size_t n) {
    if (!dir || !*dir) return errorf(err, n, "%s needs a directory", flag);
    char parent[4096];
    parent_of(dir, parent, sizeof parent);
    if (make_dirs(flag, dir, parent, err, n)) return -1;
    return probe_write(flag, dir, parent, err, n);
}

int outpath_need(OutNeed *nd, const char *what, const char *path, uint64_t bytes, char *err, size_t n) {
    if (nd->n >= OUTPATH_MAX_NEEDS) return errorf(err, n, "too many outputs to check (%d)", nd->n);
    char at[4096];
    snprintf(at, sizeof at, "%s", path);
    struct stat st;
    struct statvfs fs;
    /* the nearest existing ancestor names the file system */
    while (stat(at, &st) != 0) {
        char up[4096];
        parent_of(at, up, sizeof up);
        if (!strcmp(up, at)) return errorf(err, n, "%s: no existing directory above %s", what, path);
        snprintf(at, sizeof at, "%s", up);
    }
    if (statvfs(at, &fs) != 0) return errorf(err, n, "%s: cannot read the free space of %s: %s", what, at, strerror(errno));
    int k = nd->n++;
    nd->what[k] = what;
    nd->bytes[k] = bytes;
    nd->dev[k] = (uint64_t)st.st_dev;
    nd->free_bytes[k] = (uint64_t)fs.f_bavail * (uint64_t)fs.f_frsize;
    return 0;
}

int outpath_check(const OutNeed *nd, char *err, size_t n) {
    for (int i = 0; i < nd->n; i++) {
        bool first = true;
        uint64_t sum = 0;
        for (int j = 0; j < nd->n; j++) {
            if (nd->dev[j] != nd->dev[i]) continue;
            if (j < i) first = false;
            sum += nd->bytes[j];
        }
        if (!first || sum <= nd->free_bytes[i]) continue;
        char b1[32], b2[32], list[1024];
        size_t used = 0;
        list[0] = 0;
        for (int j = 0; j < nd->n && used + 1 < sizeof list; j++) {
            if (nd->dev[j] != nd->dev[i]) continue;
            char b3[32];
            int w = snprintf(list + used, sizeof list - used, "%s%s %s", used ? ", " : "", nd->what[j],
                             plan_bytes_str(nd->bytes[j], b3, sizeof b3));
            if (w > 0) used = (size_t)w < sizeof list - used ? used + (size_t)w : sizeof list - 1;
        }
        return errorf(err, n,
                      "not enough disk space for what this run writes: %s needed (%s), %s free on that file system; "
                      "free some space or write elsewhere",
                      plan_bytes_str(sum, b1, sizeof b1), list, plan_bytes_str(nd->free_bytes[i], b2, sizeof b2));
    }
    return 0;
}
