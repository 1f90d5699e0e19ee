/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme doctor: can this machine run the GPU data path, and which tier?
 *
 * gpunvme_doctor_scan() takes an inventory from sysfs, procfs and PCI
 * configuration space only (no external tool, touches no device): NVMe
 * controllers, NVIDIA GPUs, the PCIe path between each GPU and each
 * controller (bridges, link of every hop, ACS), the IOMMU, the modules
 * present, hugepages, the memlock limit, power states.
 * gpunvme_doctor_judge() turns it (plus the results of active probes the
 * caller ran, see struct gpunvme_doctor_probe) into a verdict per GPU x NVMe
 * pair: Tier 1 / Tier 2 / Tier 3 yes, no (with the reason and the fix) or
 * unknown (with the reason).
 *
 * A file that is missing, truncated or garbage never fails the scan: the
 * fact it would have given reads "unknown" and its `why` says which file.
 *
 * The root: NULL reads the running machine (/sys, /proc, getrlimit). A
 * directory reads DIR/sys, DIR/proc and DIR/doctor-extra.txt (what is not a
 * file on a live system: "memlock <bytes>|unlimited"), as written by
 * scripts/doctor-capture.sh. The capture script's attribute list and this
 * reader must agree (tests/doctor checks it by a capture round trip).
 */
#ifndef GPUNVME_DOCTOR_H
#define GPUNVME_DOCTOR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUNVME_DOCTOR_MAX_NVME 32
#define GPUNVME_DOCTOR_MAX_GPU 16
#define GPUNVME_DOCTOR_MAX_UP 16   /* bridges above a device */
#define GPUNVME_DOCTOR_MAX_HOPS 34
#define GPUNVME_DOCTOR_MAX_REASONS 6
#define GPUNVME_DOCTOR_TEXT 320

enum gpunvme_doctor_answer {
	GPUNVME_DOCTOR_UNKNOWN = 0,
	GPUNVME_DOCTOR_NO = 1,
	GPUNVME_DOCTOR_YES = 2,
};
/* "unknown", "no", "yes" */
const char *gpunvme_doctor_answer_str(enum gpunvme_doctor_answer a);

enum gpunvme_doctor_iommu {
	GPUNVME_IOMMU_UNKNOWN = 0,
	GPUNVME_IOMMU_OFF,
	GPUNVME_IOMMU_PASSTHROUGH,
	GPUNVME_IOMMU_TRANSLATED,
};
/* "unknown", "off", "passthrough", "translated" */
const char *gpunvme_doctor_iommu_str(enum gpunvme_doctor_iommu m);

struct gpunvme_doctor_hop {
	char bdf[13];       /* the function whose Link Status describes the hop */
	double gts;
	int width;
	double gbytes;      /* GB/s after encoding, 0 unknown */
	int acs_ctrl;       /* bridges: ACS Control, -1 none/unknown */
	bool acs_unknown;   /* config space too short to tell */
	int vendor;         /* -1 unknown */
};

/* One PCI function as the doctor sees it. Unknown values: "" for text,
 * -1 for numbers, 0 for link speed and width. */
struct gpunvme_doctor_dev {
	char bdf[13];
	int vendor, device;         /* -1 when unreadable */
	int class_code;             /* 24 bit, -1 when unreadable */
	char driver[64];            /* "" none bound */
	int iommu_group;            /* -1 none */
	char iommu_type[16];        /* the group's type: "DMA", "DMA-FQ", "identity"; "" unknown */
	int numa_node;
	double link_gts;            /* current link: GT/s, 0 unknown */
	int link_width;             /* lanes, 0 unknown */
	char power_state[16];       /* "D0", "D3hot", ...; "" unknown */
	int cfg_len;                /* bytes of config space readable, -1 none */
	int acs_ctrl;               /* ACS Control register, -1 absent/unknown */
	bool acs_unknown;           /* config space too short to say */
	char host_bridge[32];       /* "pci0000:00", "" unknown */
	int nup;                    /* bridges above, nearest first */
	struct gpunvme_doctor_hop up[GPUNVME_DOCTOR_MAX_UP]; /* the bridges, their links */
	char why[GPUNVME_DOCTOR_TEXT]; /* what could not be read, "" when all */
};

struct gpunvme_doctor_nvme {
	struct gpunvme_doctor_dev pci;
	char kname[32];      /* "nvme0" while the kernel driver owns it */
	char model[64];
	int namespaces;      /* -1 unknown */
	int queues;          /* kernel I/O queues (blk-mq), -1 unknown */
	int max_transfer_kib;/* max_hw_sectors_kb: MDTS as the kernel caps it, -1 unknown */
	char mounted[128];   /* "/dev/nvme0n1p2 on /" ..., "" none */
};

struct gpunvme_doctor_gpu {
	struct gpunvme_doctor_dev pci;
	char model[96];                /* "" unknown */
	uint64_t bar1_bytes;           /* 0 unknown */
	uint64_t memory_bytes;         /* 0 unknown (only a probe knows) */
};

/* Results of the active probes (gpunvme doctor --probe); the caller runs
 * them and stores them here before gpunvme_doctor_judge. `run` false: the
 * text says why it was not run. */
struct gpunvme_doctor_probe_result {
	bool run;
	bool ok;
	char text[GPUNVME_DOCTOR_TEXT];
};
struct gpunvme_doctor_probe {
	struct gpunvme_doctor_probe_result bar0[GPUNVME_DOCTOR_MAX_NVME];     /* CPU mapping of BAR0 */
	struct gpunvme_doctor_probe_result register_io[GPUNVME_DOCTOR_MAX_GPU][GPUNVME_DOCTOR_MAX_NVME];
	struct gpunvme_doctor_probe_result gpu_read[GPUNVME_DOCTOR_MAX_GPU][GPUNVME_DOCTOR_MAX_NVME];
	struct gpunvme_doctor_probe_result dmabuf[GPUNVME_DOCTOR_MAX_GPU];
};

struct gpunvme_doctor_reason {
	char why[GPUNVME_DOCTOR_TEXT];
	char fix[GPUNVME_DOCTOR_TEXT]; /* "" when there is nothing to do */
};

struct gpunvme_doctor_verdict {
	enum gpunvme_doctor_answer answer;
	char route[96];    /* Tier 2: "dma-buf + kernel module" */
	int nreasons;
	struct gpunvme_doctor_reason reasons[GPUNVME_DOCTOR_MAX_REASONS];
};

struct gpunvme_doctor_pair {
	int gpu, nvme;               /* indexes into the report */
	char path_kind[32];          /* "switch", "root-complex", "cross-root-complex", "unknown" */
	char common[72];             /* the shared bridge, host bridge, or "A + B" */
	int nhops;
	struct gpunvme_doctor_hop hops[GPUNVME_DOCTOR_MAX_HOPS];
	int narrowest;               /* index into hops, -1 unknown */
	double link_gbytes;          /* the narrowest hop, 0 unknown */
	bool acs_redirect;           /* a bridge below the shared switch redirects P2P */
	char acs_bridge[13];
	struct gpunvme_doctor_verdict tier[3]; /* Tier 1, 2, 3 */
	int nnotes;
	char notes[GPUNVME_DOCTOR_MAX_REASONS][GPUNVME_DOCTOR_TEXT];
};

struct gpunvme_doctor_system {
	enum gpunvme_doctor_iommu iommu;
	char iommu_why[GPUNVME_DOCTOR_TEXT];
	int iommu_groups;            /* -1 unknown */
	char cmdline[512];
	enum gpunvme_doctor_answer vfio_pci, uio_pci_generic, kmod, noiommu;
	char nvidia_version[64];     /* "" no driver */
	enum gpunvme_doctor_answer nvidia_open;    /* open kernel module */
	enum gpunvme_doctor_answer dmabuf;         /* dma-buf export of GPU memory */
	char dmabuf_why[GPUNVME_DOCTOR_TEXT];
	long hugepages_total, hugepages_free;      /* 2 MiB pages, -1 unknown */
	bool memlock_known, memlock_unlimited;
	uint64_t memlock_bytes;
	char why[GPUNVME_DOCTOR_TEXT];
};

struct gpunvme_doctor_report {
	char root[256];              /* "" live machine */
	struct gpunvme_doctor_system sys;
	int nnvme, ngpu, npairs;
	struct gpunvme_doctor_nvme nvme[GPUNVME_DOCTOR_MAX_NVME];
	struct gpunvme_doctor_gpu gpu[GPUNVME_DOCTOR_MAX_GPU];
	/* per controller: can the user-space driver own it (the CPU data path,
	 * and the NVMe half of Tier 1), whatever GPU it is paired with */
	struct gpunvme_doctor_verdict nvme_verdict[GPUNVME_DOCTOR_MAX_NVME];
	struct gpunvme_doctor_pair pairs[GPUNVME_DOCTOR_MAX_GPU * GPUNVME_DOCTOR_MAX_NVME];
	bool probed;
	struct gpunvme_doctor_probe probe;
};

/* Inventory of the machine at root (NULL: this one). Heap-allocated report
 * in *out (gpunvme_doctor_free). 0, -ENOMEM, or -ENAMETOOLONG for a root
 * too long; missing files are not errors. */
int gpunvme_doctor_scan(const char *root, struct gpunvme_doctor_report **out);

/* (Re)compute every pair's path and verdicts from the inventory and, when
 * rep->probed, the probe results. Returns how many pairs can run Tier 1
 * now (0 when none). */
int gpunvme_doctor_judge(struct gpunvme_doctor_report *rep);

void gpunvme_doctor_free(struct gpunvme_doctor_report *rep);

/* Print every path the scans open, read or resolve to f, one per line
 * (NULL: stop). Process-wide; for the test that checks the capture script
 * copies all of them. */
void gpunvme_doctor_set_trace(FILE *f);

/* Bandwidth of a link after line encoding, GB/s: GT/s x width x 8/10
 * (2.5 and 5 GT/s) or 128/130 (8 GT/s and up), / 8. 0 for unknown input. */
double gpunvme_doctor_link_gbytes(double gts, int width);

#ifdef __cplusplus
}
#endif

#endif /* GPUNVME_DOCTOR_H */
