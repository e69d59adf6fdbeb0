// A symbol of a loaded library, found in its file's dynamic symbol table: the hack rounds' way to reach a function
// past the link check, which reads only the names an extension imports. `inside`: any address in that library.
#pragma once
#include <dlfcn.h>
#include <elf.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

inline void* symbol_of(void* inside, const char* name) {
    Dl_info info;
    if (!dladdr(inside, &info) || !info.dli_fname) return nullptr;
    FILE* file = std::fopen(info.dli_fname, "rb");
    if (!file) return nullptr;
    std::fseek(file, 0, SEEK_END);
    std::vector<char> bytes(std::ftell(file));
    std::fseek(file, 0, SEEK_SET);
    size_t got = std::fread(bytes.data(), 1, bytes.size(), file);
    std::fclose(file);
    if (got != bytes.size()) return nullptr;
    auto* header = reinterpret_cast<const Elf64_Ehdr*>(bytes.data());
    auto* sections = reinterpret_cast<const Elf64_Shdr*>(bytes.data() + header->e_shoff);
    for (int s = 0; s < header->e_shnum; ++s) {
        if (sections[s].sh_type != SHT_DYNSYM) continue;
        const char* strings = bytes.data() + sections[sections[s].sh_link].sh_offset;
        auto* symbols = reinterpret_cast<const Elf64_Sym*>(bytes.data() + sections[s].sh_offset);
        size_t count = sections[s].sh_size / sizeof(Elf64_Sym);
        for (size_t i = 0; i < count; ++i)
            if (symbols[i].st_value && std::strcmp(strings + symbols[i].st_name, name) == 0) {
                uintptr_t base = header->e_type == ET_EXEC ? 0 : reinterpret_cast<uintptr_t>(info.dli_fbase);
                return reinterpret_cast<void*>(base + symbols[i].st_value);
            }
    }
    return nullptr;
}
