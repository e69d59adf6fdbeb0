/* The assembler guard (builds/as_guard.py): installed as `as` in a folder the compiler searches first
   (`-B`), it reads the assembly a compile hands the assembler and, before the real assembler runs,
   refuses the directives that read a file into the object (`.incbin`, `.include`) and those that could
   spell them (gas's macros and repeat blocks, `.altmacro`, `.purgem`, MRI mode). Installed as
   `as-wrapper` too, for a compiler whose own `-B` folders come before any given to it (a driver script
   adding them): gcc's `-wrapper` runs each of its programs as `as-wrapper PROGRAM ARGS...`, and the
   guard reads the assembly where PROGRAM is an assembler, then runs PROGRAM.

   A name is matched as gas could read it, so that what is refused covers what gas would run: in any
   case; with white space, control bytes, double quotes (gas joins adjacent quoted names) and C comments
   between its characters; a character written as a backslash escape; as the start of a longer name
   (`.irp` covers `.irpc`, `.rep` covers `.rept`); where a statement may begin (the file's start, after
   a line's end, a `;` or a label's `:`, or after a control byte or a comment, which this does not
   tell apart), so that a path or a string (`"/home/me/.repos/x"`) is not one. Every argument that
   names a regular file is read (gcc passes the assembly as one); assembly from standard input or an
   argument file, which this could not read first, is refused. REAL_AS, defined where it is built, is
   the assembler it then runs, with the same arguments. */

#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef REAL_AS
#error "REAL_AS: the path of the assembler to run"
#endif

#define MARK "cuda-agent assembler guard: "

static const char *const REFUSED[] = {"incbin", "include", "macro", "irp", "irep", "rep", "altmacro",
                                      "purgem", "mri"};
#define N_REFUSED (sizeof REFUSED / sizeof REFUSED[0])

static const unsigned char *text;
static size_t size;
static size_t *closes, n_closes;   /* where each `*` `/` ends a C comment, in order */

static size_t close_after(size_t at) {
    size_t lo = 0, hi = n_closes;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (closes[mid] < at) lo = mid + 1; else hi = mid;
    }
    return lo < n_closes ? closes[lo] : (size_t)-1;
}

/* Past what gas may drop between a name's characters: blanks, control bytes, quotes, comments. */
static size_t skip_gap(size_t i) {
    while (i < size) {
        unsigned char c = text[i];
        if (c <= ' ' || c == 0x7f || c == '"') {
            i++;
        } else if (c == '/' && i + 1 < size && text[i + 1] == '*') {
            size_t close = close_after(i + 2);
            if (close == (size_t)-1) return size;   /* a comment to the end */
            i = close + 2;
        } else {
            break;
        }
    }
    return i;
}

static int hex(unsigned char c) {
    return isdigit(c) ? c - '0' : isxdigit(c) ? tolower(c) - 'a' + 10 : -1;
}

/* The character at i, a backslash escape decoded, lower case; *next: where the following one starts. */
static int char_at(size_t i, size_t *next) {
    unsigned char c = text[i];
    *next = i + 1;
    if (c != '\\' || i + 1 >= size) return tolower(c);
    unsigned char e = text[i + 1];
    int value = 0;
    size_t j = i + 1;
    if (e >= '0' && e <= '7') {
        for (int k = 0; k < 3 && j < size && text[j] >= '0' && text[j] <= '7'; k++, j++)
            value = value * 8 + text[j] - '0';
    } else if ((e == 'x' || e == 'X') && j + 1 < size && hex(text[j + 1]) >= 0) {
        for (j++; j < size && hex(text[j]) >= 0; j++) value = (value * 16 + hex(text[j])) & 0xff;
    } else {
        value = e;
        j++;
    }
    *next = j;
    return tolower(value & 0xff);
}

/* The refused name that a dot at i starts, or NULL. */
static const char *refused_at(size_t i) {
    size_t next;
    if (char_at(i, &next) != '.') return NULL;
    int alive[N_REFUSED];
    size_t n_alive = N_REFUSED;
    for (size_t r = 0; r < N_REFUSED; r++) alive[r] = 1;
    for (size_t k = 0; n_alive > 0; k++) {
        for (size_t r = 0; r < N_REFUSED; r++)
            if (alive[r] && REFUSED[r][k] == '\0') return REFUSED[r];
        size_t at = skip_gap(next);
        if (at >= size) return NULL;
        int c = char_at(at, &next);
        for (size_t r = 0; r < N_REFUSED; r++)
            if (alive[r] && REFUSED[r][k] != c) { alive[r] = 0; n_alive--; }
    }
    return NULL;
}

/* Whether a statement may begin at the dot at i: what comes before it, past blanks and quotes, is
   the file's start, a line's end, `;` or `:`, a control byte or the end of a comment. */
static int statement_start(size_t i) {
    while (i > 0) {
        unsigned char c = text[--i];
        if (c == ' ' || c == '\t' || c == '"') continue;
        if (c == '/' && i > 0 && text[i - 1] == '*') return 1;
        return c == '\n' || c == ';' || c == ':' || c < ' ' || c == 0x7f;
    }
    return 1;
}

static int refuse(const char *why) {
    fprintf(stderr, "%s%s\n", MARK, why);
    return 1;
}

/* 0 when the file holds no refused directive; else 1, the refusal said. */
static int check(const char *path) {
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return refuse("cannot read the assembly it was given");
    size = (size_t)st.st_size;
    if (size == 0) { close(fd); return 0; }
    void *mapped = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (mapped == MAP_FAILED) return refuse("cannot read the assembly it was given");
    text = mapped;
    closes = malloc((size / 2 + 1) * sizeof *closes);
    if (closes == NULL) return refuse("out of memory");
    n_closes = 0;
    for (size_t i = 0; i + 1 < size; i++)
        if (text[i] == '*' && text[i + 1] == '/') closes[n_closes++] = i;
    const char *found = NULL;
    for (size_t i = 0; i < size && found == NULL; i++) {
        found = refused_at(i);
        if (found != NULL && !statement_start(i)) found = NULL;
    }
    free(closes);
    munmap(mapped, size);
    if (found == NULL) return 0;
    char why[256];
    snprintf(why, sizeof why, "the assembly uses the directive `.%s`", found);
    return refuse(why);
}

/* Whether `path` names an assembler: `as`, or a cross assembler's `<target>-as`. */
static int is_assembler(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    return strcmp(base, "as") == 0 || (n > 3 && strcmp(base + n - 3, "-as") == 0);
}

/* Reads every regular file among the assembler's arguments; 0 where all may be assembled. */
static int check_arguments(int argc, char **argv) {
    int files = 0;
    for (int a = 1; a < argc; a++) {
        struct stat st;
        if (argv[a][0] == '@') return refuse("an argument file it cannot check");
        if (strcmp(argv[a], "-") == 0) return refuse("assembly from standard input, which it cannot check");
        if (argv[a][0] != '-' && stat(argv[a], &st) == 0 && S_ISREG(st.st_mode)) {
            if (check(argv[a]) != 0) return 1;
            files++;
        }
    }
    if (files == 0) return refuse("no assembly file to check (assembly from standard input)");
    return 0;
}

int main(int argc, char **argv) {
    const char *self = strrchr(argv[0], '/');
    self = self ? self + 1 : argv[0];
    if (strcmp(self, "as-wrapper") == 0) {   /* gcc -wrapper: argv[1] is the program gcc runs */
        if (argc < 2) return refuse("no program to run");
        if (is_assembler(argv[1]) && check_arguments(argc - 1, argv + 1) != 0) return 1;
        execvp(argv[1], argv + 1);
        perror(MARK "the compiler's program");
        return 1;
    }
    if (check_arguments(argc, argv) != 0) return 1;
    argv[0] = (char *)REAL_AS;
    execv(REAL_AS, argv);
    perror(MARK REAL_AS);
    return 1;
}
