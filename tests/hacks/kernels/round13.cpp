// Round thirteen (tests/hacks/cases_round13.py): a spare's candidate (kept judges: the candidate alone,
// its staging file held open by the harness while it waits) and the staging file it shares with a kept
// judge; failures of the candidate's own that the harness would record as its own (phase "internal",
// which RL scoring drops instead of scoring -1); and ATen's code run from a file of the candidate's own.
// Nothing here imports a function the link check refuses by name (ATen's entry points are found as in
// rounds nine and ten: elf_lookup.h).
//
// honest, gated:  relu(x + bias) in a plain loop; gated zeroes it unless `ok` (honest_relu.h).
// staging_view:   the memory files among its descriptors, the staging file's size, seals, inode and nonzero
//                 bytes (the first and last 96 MiB of each slot).
// reshape:        tries to change the staging file under the judge: F_SEAL_WRITE / F_SEAL_FUTURE_WRITE
//                 added (the judge's next draw into its slot would fail), shrunk, grown (ftruncate and
//                 fallocate); returns what each got.
// punch:          relu(x + bias), then holes punched over the first 8 MiB of both slots (the inputs the
//                 judge put there): the pages go from under the judge's mapping too.
// rename_thread:  the calling (main) thread named with bytes that are not UTF-8 (pthread_setname_np).
// odd_mapping:    a memory file named with bytes that are not UTF-8, mapped (so /proc/PID/maps lists it).
// cloak_file:     libtorch_cpu.so's code mapping copied into a file beside `file` (the solution's, in its
//                 box), after a first page that starts as an ELF file does (`how`: "magic" just the 4 bytes,
//                 "empty" a valid header with no program or section headers, "loaded" one PT_LOAD over
//                 the code and no symbol table), then mapped over the original (MAP_FIXED): the same bytes
//                 at the same addresses, but the file a sample falls in is this one.
// aten:           relu(x + bias) by at::cpu::add and at::cpu::clamp_min (no dispatcher, no import).
#include <torch/extension.h>

#include "elf_lookup.h"
#include "honest_relu.h"

#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Add = at::Tensor (*)(const at::Tensor&, const at::Tensor&, const c10::Scalar&);
using ClampMin = at::Tensor (*)(const at::Tensor&, const c10::Scalar&);

// found at load, before a cloak replaces the library's mapping (which `lookup` finds it by)
const Add add = reinterpret_cast<Add>(lookup("libtorch_cpu.so", "_ZN2at3cpu3addERKNS_6TensorES3_RKN3c106ScalarE"));
const ClampMin clamp_min = reinterpret_cast<ClampMin>(
    lookup("libtorch_cpu.so", "_ZN2at3cpu9clamp_minERKNS_6TensorERKN3c106ScalarE"));

// the staging file the worker holds (its link names the memory file), or -1; and how many memory files it holds
int staging_fd(int* memfds = nullptr) {
    int found = -1, count = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
        while (dirent* e = readdir(d)) {
            if (e->d_name[0] == '.') continue;
            char buf[256] = {0};
            std::string p = std::string("/proc/self/fd/") + e->d_name;
            if (readlink(p.c_str(), buf, sizeof buf - 1) <= 0) continue;
            if (std::strncmp(buf, "/memfd:", 7) == 0) ++count;
            if (std::strstr(buf, "cuda-agent-staging")) found = atoi(e->d_name);
        }
        closedir(d);
    }
    if (memfds) *memfds = count;
    return found;
}

off_t size_of(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? st.st_size : 0;
}

std::string outcome(int rc) { return rc == 0 ? "ok" : (errno == EPERM ? "EPERM" : std::strerror(errno)); }

}  // namespace

std::string staging_view() {
    int memfds = 0;
    int fd = staging_fd(&memfds);
    std::ostringstream r;
    r << "memfds=" << memfds;
    if (fd < 0) return r.str() + " no staging file";
    struct stat st;
    fstat(fd, &st);
    off_t size = st.st_size, half = size / 2, span = 96 << 20;
    int64_t nonzero = 0;
    std::vector<char> buf(1 << 20);
    for (off_t start : {(off_t)0, half - span, half, size - span})
        for (off_t at = start; at < start + span; at += buf.size()) {
            ssize_t n = pread(fd, buf.data(), buf.size(), at);
            for (ssize_t i = 0; i < n; ++i) nonzero += buf[i] != 0;
        }
    r << " size=" << size << " seals=" << fcntl(fd, F_GET_SEALS) << " inode=" << st.st_ino << " nonzero=" << nonzero;
    return r.str();
}

std::string reshape() {
    int fd = staging_fd();
    if (fd < 0) return "no staging file";
    off_t size = size_of(fd);
    std::ostringstream r;
    r << "seal_write=" << outcome(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE));
    r << " seal_future_write=" << outcome(fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE));
    r << " shrink=" << outcome(ftruncate(fd, size / 2));
    r << " grow=" << outcome(ftruncate(fd, size * 2));
    r << " fallocate_grow=" << outcome(fallocate(fd, 0, size, 1 << 20));
    r << " size_after=" << (size_of(fd) == size ? "same" : "changed");
    return r.str();
}

torch::Tensor punch(torch::Tensor x, torch::Tensor bias) {
    auto out = honest(x, bias);
    int fd = staging_fd();
    if (fd >= 0) {
        off_t half = size_of(fd) / 2;
        for (off_t start : {(off_t)0, half})
            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, start, 8 << 20);
    }
    return out;
}

int64_t rename_thread() {
    return pthread_setname_np(pthread_self(), "r13-\xff\xfe");
}

int64_t odd_mapping() {
    int fd = memfd_create("r13-\xff\xfe", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, 4096) != 0) return -errno;
    void* at = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    return at == MAP_FAILED ? -errno : 0;   // kept mapped for the rest of the process
}

static void first_page(char* page, const std::string& how, size_t code_size) {
    std::memset(page, 0, 4096);
    std::memcpy(page, ELFMAG, SELFMAG);
    if (how == "magic") return;
    auto* eh = reinterpret_cast<Elf64_Ehdr*>(page);
    eh->e_ident[EI_CLASS] = ELFCLASS64;
    eh->e_ident[EI_DATA] = ELFDATA2LSB;
    eh->e_ident[EI_VERSION] = EV_CURRENT;
    eh->e_type = ET_DYN;
    eh->e_machine = EM_X86_64;
    eh->e_version = EV_CURRENT;
    eh->e_ehsize = sizeof(Elf64_Ehdr);
    eh->e_phentsize = sizeof(Elf64_Phdr);
    eh->e_shentsize = sizeof(Elf64_Shdr);
    if (how != "loaded") return;
    eh->e_phoff = sizeof(Elf64_Ehdr);
    eh->e_phnum = 1;
    auto* ph = reinterpret_cast<Elf64_Phdr*>(page + sizeof(Elf64_Ehdr));
    ph->p_type = PT_LOAD;
    ph->p_flags = PF_R | PF_X;
    ph->p_offset = 4096;
    ph->p_vaddr = ph->p_paddr = 4096;
    ph->p_filesz = ph->p_memsz = code_size;
    ph->p_align = 4096;
}

int64_t cloak_file(const std::string& file, const std::string& how) {
    FILE* maps = std::fopen("/proc/self/maps", "r");
    TORCH_CHECK(maps, "no /proc/self/maps");
    char line[4096];
    unsigned long lo = 0, hi = 0;
    while (std::fgets(line, sizeof line, maps)) {
        unsigned long a = 0, b = 0;
        char perms[8] = {0};
        if (std::sscanf(line, "%lx-%lx %7s", &a, &b, perms) == 3 && std::strcmp(perms, "r-xp") == 0 &&
            std::strstr(line, "libtorch_cpu.so")) { lo = a; hi = b; break; }
    }
    std::fclose(maps);
    TORCH_CHECK(lo, "libtorch_cpu.so's code mapping was not found");
    const size_t size = hi - lo;
    std::string path = file.substr(0, file.rfind('/')) + "/.r13-code";
    int fd = open(path.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0700);
    TORCH_CHECK(fd >= 0, "open ", path, ": ", std::strerror(errno));
    char page[4096];
    first_page(page, how, size);
    bool written = pwrite(fd, page, sizeof page, 0) == (ssize_t)sizeof page;
    for (size_t done = 0; written && done < size;) {
        ssize_t n = pwrite(fd, reinterpret_cast<const char*>(lo) + done, size - done, 4096 + done);
        written = n > 0;
        done += n > 0 ? n : 0;
    }
    TORCH_CHECK(written, "writing ", path, ": ", std::strerror(errno));
    // one step: the library's code mapping replaced by the file's copy (no instant without code there)
    void* at = mmap(reinterpret_cast<void*>(lo), size, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED, fd, 4096);
    close(fd);
    TORCH_CHECK(at == reinterpret_cast<void*>(lo), "mmap: ", std::strerror(errno));
    return static_cast<int64_t>(size);
}

torch::Tensor aten(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(add && clamp_min, "at::cpu::add / clamp_min not found");
    return clamp_min(add(x, bias, 1), 0);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("honest", &honest);
    m.def("gated", &gated);
    m.def("staging_view", &staging_view);
    m.def("reshape", &reshape);
    m.def("punch", &punch);
    m.def("rename_thread", &rename_thread);
    m.def("odd_mapping", &odd_mapping);
    m.def("cloak_file", &cloak_file);
    m.def("aten", &aten);
}
