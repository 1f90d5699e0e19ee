/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The emulator's DMA process (src/emu_cuda/dma_proto.h): the program
 * embedded in the library starts from a memfd and greets over its socket.
 *
 *   no_gpu      a PCI address no GPU has: the start fails with the child's
 *               own reason (it ran, it said why), not a hang or a crash;
 *               runs without a GPU too
 *   this_gpu    the current GPU's address: the process starts and ends
 *               (skipped, 77, without a GPU)
 *
 * The copies themselves are checked byte for byte by the GPU tests that run
 * with GPUNVME_EMU_DMA=process (gpu.md_stream.tier2_process and the Python
 * GPU tests, whose module chooses it).
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "emu_cuda/dma_client.h"

int main(int argc, char **argv)
{
	const char *which = argc > 1 ? argv[1] : "no_gpu";
	char why[256] = "";
	if (!strcmp(which, "no_gpu")) {
		int rc = edma_spawn_check("0000:ff:1f.7", why, sizeof(why));
		printf("no_gpu: rc %d, %s\n", rc, why);
		/* the child's greeting names the GPU it could not open */
		if (rc == 0 || !strstr(why, "did not start") || !strstr(why, "0000:ff:1f.7")) {
			fprintf(stderr, "FAIL: want a refusal naming the GPU\n");
			return 1;
		}
		return 0;
	}
	int dev, n = 0;
	char bus[32];
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		printf("this_gpu: no GPU: skipped\n");
		return 77;
	}
	if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetPCIBusId(bus, sizeof(bus), dev) != cudaSuccess)
		return 1;
	int rc = edma_spawn_check(bus, why, sizeof(why));
	printf("this_gpu %s: rc %d %s\n", bus, rc, why);
	return rc == 0 ? 0 : 1;
}
