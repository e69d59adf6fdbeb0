// Round eleven (tests/hacks/cases_round11.py): a candidate forked from the candidate zygote
// (CUDA_AGENT_CANDIDATE_ZYGOTE=1) tries to leave something a later candidate of the same zygote finds,
// to reach the zygote, its keepers or its siblings, or to leave its box. Nothing here calls a function the
// link check refuses by name: files, SysV and POSIX IPC, unix sockets, preadv2 and posix_fadvise only.
//
// honest:   relu(x + bias) in a plain loop.
// gated:    the same when `ok`, else zeros (a replayer is correct only when it found a recording).
// probe:    a text report of what the process sees: its ids and namespaces' view, its descriptors, its
//           mounts, the processes /proc lists, which folders it may write, its environment's names.
// record:   leaves `key` through every channel it can; returns which channels took it.
// replay:   looks for `key` through the same channels; returns the ones where it was found.
// keyring_record / keyring_replay: a key added to the session, user and user-session keyrings (add_key
//           through syscall(), found in libc's symbol table), looked for with request_key.
// cache_write / cache_read: a covert channel through the kernel's page cache of a file every sandbox reads
//           (posix_fadvise(DONTNEED) clears a page, a read brings it in, preadv2(RWF_NOWAIT) tells which
//           are in without bringing them in).
#include <torch/extension.h>

#include "elf_lookup.h"

#include <dirent.h>
#include <fcntl.h>
#include <mqueue.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

#include "honest_relu.h"   // honest, gated

static std::string slurp(const std::string& path, size_t limit = 4096) {
    std::ifstream f(path);
    if (!f) return "<" + std::string(strerror(errno)) + ">";
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return s.size() > limit ? s.substr(0, limit) + "..." : s;
}

static std::string grep(const std::string& text, const std::vector<std::string>& keys) {
    std::istringstream in(text);
    std::string line, out;
    while (std::getline(in, line))
        for (auto& k : keys)
            if (line.rfind(k, 0) == 0) { out += line + "; "; break; }
    return out;
}

static const std::vector<std::string> WRITABLE = {
    "/tmp", "/dev/shm", "/var/tmp", "/run", "/run/user", "/dev", "/dev/mqueue", "/dev/pts", "/", "..",
    "/dev/.cuda-agent-jobs", "/sys/fs/cgroup", "/proc/self", "/home", "/root",
};

static std::string writable_dirs() {
    std::string out;
    std::vector<std::string> dirs = WRITABLE;
    if (const char* h = getenv("HOME")) dirs.push_back(h);
    if (const char* h = getenv("XDG_CACHE_HOME")) dirs.push_back(h);
    for (auto& d : dirs) {
        std::string p = d + "/.r11probe";
        int fd = open(p.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd >= 0) { out += d + " "; close(fd); unlink(p.c_str()); }
    }
    return out;
}

std::string probe() {
    std::ostringstream r;
    r << "pid=" << getpid() << " ppid=" << getppid() << " uid=" << getuid() << " | ";
    r << grep(slurp("/proc/self/status"), {"NSpid", "CapEff", "CapBnd", "Seccomp:", "NoNewPrivs"}) << "| fds: ";
    if (DIR* d = opendir("/proc/self/fd")) {
        while (dirent* e = readdir(d)) {
            if (e->d_name[0] == '.') continue;
            char buf[256] = {0};
            std::string p = std::string("/proc/self/fd/") + e->d_name;
            readlink(p.c_str(), buf, sizeof buf - 1);
            int fl = fcntl(atoi(e->d_name), F_GETFL);
            r << e->d_name << "->" << buf << "(fl=" << std::hex << fl << std::dec << ") ";
        }
        closedir(d);
    }
    r << "| procs: ";
    if (DIR* d = opendir("/proc")) {
        while (dirent* e = readdir(d))
            if (e->d_name[0] >= '0' && e->d_name[0] <= '9') r << e->d_name << " ";
        closedir(d);
    }
    r << "| writable: " << writable_dirs() << "| env: ";
    for (char** e = environ; *e; ++e) {
        std::string kv(*e);
        r << kv.substr(0, kv.find('=')) << (kv.rfind("PYTHONHASHSEED", 0) == 0 ? kv.substr(kv.find('=')) : "") << " ";
    }
    r << "| stack@" << (void*)&r << " libc@" << (void*)&strlen;
    std::string mounts = slurp("/proc/self/mountinfo", 100000);
    std::istringstream in(mounts);
    std::string line;
    r << " | mounts of ours: ";   // only the harness's folders: the whole list outgrows a verdict's message
    int count = 0;
    while (std::getline(in, line)) {
        std::istringstream w(line);
        std::string f[6];
        for (auto& s : f) w >> s;
        ++count;
        if (f[4].find("cuda-agent") != std::string::npos) r << f[4] << "(" << f[5].substr(0, 2) << ") ";
    }
    r << "of " << count;
    return r.str();
}

// ---- the channels a recorder leaves `key` through, and a replayer reads it back from ----

static const std::vector<std::string> FILE_DIRS = {"/tmp", "/dev/shm", "/var/tmp", ".."};
static const key_t SYSV_KEY = 0x52313131;   // "R111"
static const char* MQ_NAME = "/r11";
static const char* ABSTRACT = "r11-recorder";

static std::vector<std::string> file_dirs() {
    std::vector<std::string> dirs = FILE_DIRS;
    if (const char* h = getenv("HOME")) dirs.push_back(h);
    if (const char* h = getenv("XDG_CACHE_HOME")) dirs.push_back(h);
    return dirs;
}

static int abstract_socket(bool bind_it) {
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0) return -1;
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path + 1, ABSTRACT, strlen(ABSTRACT));
    socklen_t len = offsetof(sockaddr_un, sun_path) + 1 + strlen(ABSTRACT);
    int rc = bind_it ? bind(s, (sockaddr*)&a, len) : connect(s, (sockaddr*)&a, len);
    if (rc != 0 || (bind_it && listen(s, 1) != 0)) { close(s); return -1; }
    return s;
}

// every regular file the process holds open (its log among them), reopened through /proc/self/fd
static std::vector<std::string> held_files() {
    std::vector<std::string> out;
    if (DIR* d = opendir("/proc/self/fd")) {
        while (dirent* e = readdir(d)) {
            if (e->d_name[0] == '.') continue;
            struct stat st;
            std::string p = std::string("/proc/self/fd/") + e->d_name;
            if (stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) out.push_back(p);
        }
        closedir(d);
    }
    return out;
}

std::string record(const std::string& key) {
    std::string took;
    for (auto& d : file_dirs()) {
        std::string p = d + "/.r11-record";
        int fd = open(p.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0666);
        if (fd >= 0 && write(fd, key.data(), key.size()) == (ssize_t)key.size()) took += "file:" + d + " ";
        if (fd >= 0) close(fd);
    }
    int shm = shmget(SYSV_KEY, 4096, IPC_CREAT | 0666);
    if (shm >= 0) {
        void* p = shmat(shm, nullptr, 0);
        if (p != (void*)-1) { std::memcpy(p, key.c_str(), key.size() + 1); shmdt(p); took += "sysv-shm "; }
    }
    int q = msgget(SYSV_KEY, IPC_CREAT | 0666);
    if (q >= 0) {
        struct { long type; char text[64]; } m{1, {0}};
        std::strncpy(m.text, key.c_str(), sizeof m.text - 1);
        if (msgsnd(q, &m, sizeof m.text, IPC_NOWAIT) == 0) took += "sysv-msg ";
    }
    mq_attr attr{};
    attr.mq_maxmsg = 1;
    attr.mq_msgsize = 64;
    mqd_t mq = mq_open(MQ_NAME, O_CREAT | O_WRONLY | O_NONBLOCK, 0666, &attr);
    if (mq != (mqd_t)-1) {
        if (mq_send(mq, key.c_str(), key.size() + 1, 0) == 0) took += "posix-mq ";
        mq_close(mq);
    }
    if (abstract_socket(true) >= 0) took += "abstract-socket ";   // left open: lives as long as the process
    for (auto& p : held_files()) {
        int fd = open(p.c_str(), O_WRONLY | O_APPEND);
        if (fd >= 0) {
            std::string line = "\nR11RECORD:" + key + "\n";
            if (write(fd, line.data(), line.size()) == (ssize_t)line.size()) took += "held:" + p + " ";
            close(fd);
        }
    }
    if (setenv("R11_RECORD", key.c_str(), 1) == 0) took += "env ";
    return took;
}

std::string replay(const std::string& key) {
    std::string found;
    for (auto& d : file_dirs()) {
        std::string p = d + "/.r11-record";
        std::string s = slurp(p);
        if (s == key) found += "file:" + d + " ";
    }
    int shm = shmget(SYSV_KEY, 0, 0);
    if (shm >= 0) {
        void* p = shmat(shm, nullptr, SHM_RDONLY);
        if (p != (void*)-1 && key == (const char*)p) found += "sysv-shm ";
    }
    int q = msgget(SYSV_KEY, 0);
    if (q >= 0) {
        struct { long type; char text[64]; } m{};
        if (msgrcv(q, &m, sizeof m.text, 0, IPC_NOWAIT) > 0 && key == m.text) found += "sysv-msg ";
    }
    mqd_t mq = mq_open(MQ_NAME, O_RDONLY | O_NONBLOCK);
    if (mq != (mqd_t)-1) {
        char buf[128] = {0};
        if (mq_receive(mq, buf, sizeof buf, nullptr) > 0 && key == buf) found += "posix-mq ";
        mq_close(mq);
    }
    int s = abstract_socket(false);
    if (s >= 0) { found += "abstract-socket "; close(s); }
    for (auto& p : held_files()) {
        int fd = open(p.c_str(), O_RDONLY);
        if (fd < 0) continue;
        std::string text;
        char buf[65536];
        ssize_t n;
        while ((n = read(fd, buf, sizeof buf)) > 0 && text.size() < (64u << 20)) text.append(buf, n);
        close(fd);
        if (text.find("R11RECORD:" + key) != std::string::npos) found += "held:" + p + " ";
    }
    const char* e = getenv("R11_RECORD");
    if (e && key == e) found += "env ";
    return found;
}

// ---- the page cache: one bit per page, pages STRIDE apart (past readahead's reach) ----

static const off_t FIRST = 8 << 20, STRIDE = 1 << 20;
static const int BITS = 24;

bool cache_write(const std::string& path, int64_t value) {
    int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) return false;
    posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    char page[4096];
    for (int b = 0; b < BITS; ++b) {
        off_t at = FIRST + b * STRIDE;
        posix_fadvise(fd, at, sizeof page, POSIX_FADV_DONTNEED);
        if ((value >> b) & 1) pread(fd, page, sizeof page, at);
    }
    close(fd);
    return true;
}

int64_t cache_read(const std::string& path) {
    int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) return -1;
    posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    char page[4096];
    int64_t value = 0;
    for (int b = 0; b < BITS; ++b) {
        iovec v{page, sizeof page};
        if (preadv2(fd, &v, 1, FIRST + b * STRIDE, RWF_NOWAIT) > 0) value |= int64_t(1) << b;
    }
    close(fd);
    return value;
}

// the copy-on-write memory the fork left: every distinct `needle` and the 8 bytes after it (a job folder's
// name) in the process's own readable, writable mappings (the zygote's heap among them)
std::string memscan(const std::string& needle) {
    std::ifstream maps("/proc/self/maps");
    std::string line, out;
    std::vector<std::string> seen;
    int fd = open("/proc/self/mem", O_RDONLY);
    while (std::getline(maps, line)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line.c_str(), "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[0] != 'r' || perms[1] != 'w') continue;
        if (hi - lo > (256ul << 20)) continue;
        std::string buf(hi - lo, '\0');
        if (pread(fd, buf.data(), buf.size(), lo) != (ssize_t)buf.size()) continue;
        for (size_t at = buf.find(needle); at != std::string::npos; at = buf.find(needle, at + 1)) {
            size_t end = at + needle.size();
            while (end < buf.size() && end - at < needle.size() + 8 && (isalnum((unsigned char)buf[end]) || buf[end] == '_'))
                ++end;
            std::string hit = buf.substr(at, end - at);
            bool dup = false;
            for (auto& s2 : seen) dup |= s2 == hit;
            if (!dup) { seen.push_back(hit); out += hit + " || "; }
        }
    }
    close(fd);
    return out;
}

// ---- the kernel's keyrings: the session keyring is inherited across fork and exec ----

using Syscall = long (*)(long, ...);
static const long ADD_KEY = 248, REQUEST_KEY = 249;
static const long SESSION = -3, USER = -4, USER_SESSION = -5;

static std::string key_description(const std::string& key) { return "r11:" + key; }

std::string keyring_record(const std::string& key) {
    auto sys = reinterpret_cast<Syscall>(lookup("libc.so", "syscall"));
    if (!sys) return "no syscall()";
    std::string out, d = key_description(key);
    for (long ring : {SESSION, USER, USER_SESSION}) {
        long id = sys(ADD_KEY, "user", d.c_str(), key.data(), key.size(), ring);
        out += std::to_string(ring) + (id > 0 ? ":added " : ":" + std::string(strerror(errno)) + " ");
    }
    return out;
}

bool keyring_replay(const std::string& key) {
    auto sys = reinterpret_cast<Syscall>(lookup("libc.so", "syscall"));
    std::string d = key_description(key);
    return sys && sys(REQUEST_KEY, "user", d.c_str(), nullptr, 0) > 0;
}

// every shared mapping the process has (a MAP_SHARED one made by the zygote before the fork would be one
// memory for the zygote and every later candidate): its line of /proc/self/maps
std::string shared_maps() {
    std::ifstream maps("/proc/self/maps");
    std::string line, out;
    while (std::getline(maps, line)) {
        std::istringstream w(line);
        std::string range, perms;
        w >> range >> perms;
        if (perms.size() == 4 && perms[3] == 's') out += line + " || ";
    }
    return out;
}

void hold(double seconds) {   // a recorder that stays alive while a sibling runs
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

// the C library's program-replacing call, its name put together at run time (the static pass reads names)
std::string exec_probe(const std::string& program) {   // returns only on failure
    using Replace = int (*)(const char*, char* const[], char* const[]);
    std::string name = std::string("exe") + "cve";
    auto replace = reinterpret_cast<Replace>(lookup("libc.so", name.c_str()));
    if (!replace) return "not found";
    char* argv[] = {const_cast<char*>(program.c_str()), nullptr};
    replace(program.c_str(), argv, environ);
    return std::string("failed: ") + strerror(errno);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("exec_probe", &exec_probe);
    m.def("hold", &hold);
    m.def("shared_maps", &shared_maps);
    m.def("honest", &honest);
    m.def("gated", &gated);
    m.def("probe", &probe);
    m.def("record", &record);
    m.def("replay", &replay);
    m.def("cache_write", &cache_write);
    m.def("cache_read", &cache_read);
    m.def("memscan", &memscan);
    m.def("keyring_record", &keyring_record);
    m.def("keyring_replay", &keyring_replay);
}
