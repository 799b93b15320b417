/* See lz4.h: literal-only LZ4 block encoder. */
#include <string.h>
#include "lz4.h"

int LZ4_compressBound(int inputSize) {
    if (inputSize < 0) return 0;
    return inputSize + inputSize / 255 + 16;
}

int LZ4_compress_default(const char *src, char *dst, int srcSize, int dstCapacity) {
    int out = 0;
    int length = srcSize;
    if (srcSize < 0 || dstCapacity < LZ4_compressBound(srcSize)) return 0;
    /* One sequence: token (literal length, no match), length bytes, literals. */
    dst[out++] = (char)((length >= 15 ? 15 : length) << 4);
    if (length >= 15) {
        int rest = length - 15;
        while (rest >= 255) { dst[out++] = (char)255; rest -= 255; }
        dst[out++] = (char)rest;
    }
    memcpy(dst + out, src, (size_t)srcSize);
    return out + srcSize;
}
