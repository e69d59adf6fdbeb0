// The red-team kernels' way to a function without importing it by name (rounds nine to eleven): its
// address from a library's dynamic symbol table, read from the file /proc/self/maps names, plus where
// the library is mapped. Plain fopen/fread only: nothing the link check lists.
#pragma once

#include <elf.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

uintptr_t lookup(const char* library, const char* name) {
    FILE* maps = std::fopen("/proc/self/maps", "r");
    if (!maps) return 0;
    char line[4096];
    uintptr_t base = 0;
    std::string path;
    while (std::fgets(line, sizeof line, maps)) {
        unsigned long lo = 0, hi = 0, offset = 0;
        char perms[8] = {0}, file[4096] = {0};
        if (std::sscanf(line, "%lx-%lx %7s %lx %*s %*s %4095s", &lo, &hi, perms, &offset, file) == 5 &&
            offset == 0 && std::strstr(file, library)) {
            base = lo;
            path = file;
            break;
        }
    }
    std::fclose(maps);
    if (!base) return 0;
    FILE* elf = std::fopen(path.c_str(), "rb");
    if (!elf) return 0;
    uintptr_t found = 0;
    Elf64_Ehdr header;
    if (std::fread(&header, sizeof header, 1, elf) == 1) {
        std::vector<Elf64_Phdr> programs(header.e_phnum);
        std::fseek(elf, header.e_phoff, SEEK_SET);
        std::fread(programs.data(), sizeof(Elf64_Phdr), programs.size(), elf);
        uintptr_t first = UINTPTR_MAX;
        for (auto& p : programs) if (p.p_type == PT_LOAD && p.p_vaddr < first) first = p.p_vaddr;
        first &= ~uintptr_t(0xfff);
        std::vector<Elf64_Shdr> sections(header.e_shnum);
        std::fseek(elf, header.e_shoff, SEEK_SET);
        std::fread(sections.data(), sizeof(Elf64_Shdr), sections.size(), elf);
        for (auto& s : sections) {
            if (s.sh_type != SHT_DYNSYM) continue;
            const Elf64_Shdr& strings = sections[s.sh_link];
            std::vector<char> names(strings.sh_size);
            std::fseek(elf, strings.sh_offset, SEEK_SET);
            std::fread(names.data(), 1, names.size(), elf);
            std::vector<Elf64_Sym> symbols(s.sh_size / sizeof(Elf64_Sym));
            std::fseek(elf, s.sh_offset, SEEK_SET);
            std::fread(symbols.data(), sizeof(Elf64_Sym), symbols.size(), elf);
            for (auto& sym : symbols)
                if (sym.st_shndx && sym.st_name < names.size() && std::strcmp(&names[sym.st_name], name) == 0) {
                    found = base + sym.st_value - first;
                    break;
                }
        }
    }
    std::fclose(elf);
    return found;
}

}  // namespace
