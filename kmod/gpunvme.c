// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * gpunvme: owns an NVMe controller for the user-space driver, like vfio-pci,
 * and turns memory the controller is to DMA to (the caller's pages, a
 * dma-buf from any exporter, a peer device's BAR, NVIDIA's legacy P2P
 * pages) into bus addresses through the kernel's DMA API, so it works with
 * the IOMMU translating. Bound on request only (driver_override; see
 * scripts/kmod-bind.sh). Interface: include/gpunvme/uapi/kmod.h.
 *
 * Teardown rule: when the last reference to the open file goes (close,
 * munmap of BAR0, process death), bus mastering is cleared and the
 * controller disabled BEFORE any page is unmapped or unpinned.
 *
 * Unmap rule: the module cannot see the queues (they live in the owner's
 * memory), so it cannot know whether a command still targets a mapping.
 * GPUNVME_KMOD_UNMAP while the controller may still process commands
 * retires the mapping instead: its handle is gone at once, but its pages
 * stay pinned and mapped for the device until the controller is next seen
 * stopped (reset by the owner, GPUNVME_KMOD_DISABLE, close, unbind).
 *
 * Locking: c->lock is never held across a wait the caller controls (a page
 * fault on the caller's memory may block in userfaultfd or FUSE for ever):
 * user pages are pinned and the address table copied out without it, so
 * an unbind or another thread is never stuck behind such a fault.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/cdev.h>
#include <linux/delay.h>
#include <linux/dma-buf.h>
#include <linux/dma-mapping.h>
#include <linux/fs.h>
#include <linux/idr.h>
#include <linux/io.h>
#include <linux/io-64-nonatomic-lo-hi.h>
#include <linux/iommu.h>
#include <linux/jiffies.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/overflow.h>
#include <linux/pci.h>
#include <linux/scatterlist.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/version.h>

#include "gpunvme/uapi/kmod.h"

#define GNV_MAX_CTRL 64
/* NVMe register offsets (NVMe base spec 2.0, section 3.1.4) */
#define NVME_REG_CAP 0x00
#define NVME_REG_CC 0x14
#define NVME_REG_CSTS 0x1c

static unsigned int max_map_mb = 65536;
module_param(max_map_mb, uint, 0644);
MODULE_PARM_DESC(max_map_mb, "largest single mapping in MiB (default 65536)");
static unsigned int pin_limit_mb;
module_param(pin_limit_mb, uint, 0644);
MODULE_PARM_DESC(pin_limit_mb, "host memory one controller may have pinned, MiB (0: RLIMIT_MEMLOCK alone)");
static unsigned int disable_timeout_ms = 30000;
module_param(disable_timeout_ms, uint, 0644);
MODULE_PARM_DESC(disable_timeout_ms, "upper bound of the wait for CSTS.RDY=0 after CC.EN=0 (default 30000)");

static dev_t gnv_devt;
static struct class *gnv_class;
static DEFINE_IDA(gnv_minors);

/* ---- NVIDIA's legacy P2P interface (nv-p2p.h ABI), found at run time ---- */
struct gnv_nvp2p_page {
	u64 physical_address;
	union {
		struct {
			u32 fermi[2];
		} fermi;
	} registers;
};

struct gnv_nvp2p_page_table {
	u32 version;
	u32 page_size; /* 0: 4 KiB, 1: 64 KiB, 2: 128 KiB */
	struct gnv_nvp2p_page **pages;
	u32 entries;
	u8 *gpu_uuid;
};

struct gnv_nvp2p_dma_mapping {
	u32 version;
	u32 page_size_type;
	u32 entries;
	u64 *dma_addresses;
	void *private;
	struct pci_dev *pci_dev;
};

typedef int (*nvp2p_get_pages_t)(u64 token, u32 va_space, u64 va, u64 len,
				 struct gnv_nvp2p_page_table **table,
				 void (*free_cb)(void *data), void *data);
typedef int (*nvp2p_put_pages_t)(u64 token, u32 va_space, u64 va,
				 struct gnv_nvp2p_page_table *table);
typedef int (*nvp2p_free_table_t)(struct gnv_nvp2p_page_table *table);
typedef int (*nvp2p_dma_map_t)(struct pci_dev *pdev, struct gnv_nvp2p_page_table *table,
			       struct gnv_nvp2p_dma_mapping **map);
typedef int (*nvp2p_dma_unmap_t)(struct pci_dev *pdev, struct gnv_nvp2p_page_table *table,
				 struct gnv_nvp2p_dma_mapping *map);
typedef int (*nvp2p_free_dma_t)(struct gnv_nvp2p_dma_mapping *map);

struct gnv_nvp2p_ops {
	nvp2p_get_pages_t get_pages;
	nvp2p_put_pages_t put_pages;
	nvp2p_free_table_t free_table;
	nvp2p_dma_map_t dma_map;
	nvp2p_dma_unmap_t dma_unmap;
	nvp2p_free_dma_t free_dma;
};

static const char *const gnv_nvp2p_names[] = {
	"nvidia_p2p_get_pages",		"nvidia_p2p_put_pages",
	"nvidia_p2p_free_page_table",	"nvidia_p2p_dma_map_pages",
	"nvidia_p2p_dma_unmap_pages",	"nvidia_p2p_free_dma_mapping",
};

/*
 * Look the symbols up now (nvidia.ko may load after this module), taking a
 * reference on nvidia.ko for each. 0, or -ENOENT naming what is missing.
 */
static int gnv_nvp2p_get(struct gnv_nvp2p_ops *ops, const char **missing)
{
	void **slot = (void **)ops;
	size_t i, j;

	for (i = 0; i < ARRAY_SIZE(gnv_nvp2p_names); i++) {
		slot[i] = __symbol_get(gnv_nvp2p_names[i]);
		if (!slot[i]) {
			for (j = 0; j < i; j++)
				__symbol_put(gnv_nvp2p_names[j]);
			*missing = gnv_nvp2p_names[i];
			return -ENOENT;
		}
	}
	return 0;
}

static void gnv_nvp2p_put(void)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(gnv_nvp2p_names); i++)
		__symbol_put(gnv_nvp2p_names[i]);
}

/* ---- controller state ----------------------------------------------------- */

struct gnv_ctrl;

struct gnv_map {
	struct list_head node;
	struct gnv_ctrl *c;
	u32 handle;
	u32 kind;
	u64 len;
	/* USER */
	struct page **pages;
	unsigned long npages;
	struct sg_table sgt;
	bool sgt_mapped;
	struct mm_struct *mm; /* whose locked_vm was charged */
	unsigned long locked; /* pages charged to mm */
	u64 pinned;           /* bytes counted in c->pinned */
	/* DMABUF */
	struct dma_buf *dbuf;
	struct dma_buf_attachment *att;
	struct sg_table *dsgt;
	/* PEER */
	struct pci_dev *peer;
	dma_addr_t peer_dma;
	/* NVP2P */
	struct gnv_nvp2p_ops nv;
	u64 nv_va;
	struct gnv_nvp2p_page_table *nv_table;
	struct gnv_nvp2p_dma_mapping *nv_dma;
	bool nv_revoked;
	bool nv_held;         /* references on nvidia.ko's symbols taken */
};

struct gnv_ctrl {
	struct pci_dev *pdev;
	void __iomem *bar0;
	resource_size_t bar0_start;
	resource_size_t bar0_len;
	struct cdev *cdev;            /* cdev_alloc: outlives c while a file holds it */
	struct address_space *mapping; /* the open file's: BAR0 mappings to zap on removal */
	struct device *dev;
	int minor;
	struct mutex lock; /* everything below */
	bool busy;         /* one opener at a time */
	bool removed;
	struct list_head maps;
	struct list_head retired; /* unmapped while the controller ran */
	u32 next_handle;
	u64 pinned;        /* bytes of host memory pinned by USER maps, retired too */
};

static bool gnv_iommu_translates(struct pci_dev *pdev)
{
	struct iommu_domain *d = iommu_get_domain_for_dev(&pdev->dev);

	return d && d->type != IOMMU_DOMAIN_IDENTITY;
}

/*
 * Stop the controller's DMA. Bus mastering is cleared first: from then on
 * the function issues no memory requests at all (PCIe base 6.0, 7.5.1.1.3),
 * so it fetches no further command and writes nowhere, whatever it does
 * with the reset. Then CC.EN=0 and a wait for CSTS.RDY=0 (NVMe base spec
 * 2.0, 3.7.2: every queue deleted, every command aborted), at most CAP.TO
 * (units of 500 ms, 3.1.4.1) and at most disable_timeout_ms, so that
 * nothing the controller had fetched is still pending when bus mastering
 * comes back (the next open, GPUNVME_KMOD_DISABLE). vfio-pci stops a
 * function in the same order.
 *
 * The other order (reset first) leaves a window on QEMU 7.2's emulated
 * controller: a command fetched while its reset drains the block layer is
 * queued there, runs after CSTS.RDY=0 and writes its data then, after the
 * pages were unpinned (kmod.unbind-inflight, 6.12 guests).
 */
static void gnv_disable(struct gnv_ctrl *c)
{
	u32 cc, csts;
	u64 cap;
	unsigned long to_ms, deadline;

	pci_clear_master(c->pdev);
	cc = readl(c->bar0 + NVME_REG_CC);
	if (cc == ~0u) {
		dev_warn(&c->pdev->dev, "controller reads all ones (removed?): bus mastering cleared\n");
		return;
	}
	cap = lo_hi_readq(c->bar0 + NVME_REG_CAP);
	to_ms = ((cap >> 24) & 0xff) * 500;
	if (!to_ms)
		to_ms = 500;
	to_ms = min_t(unsigned long, to_ms, disable_timeout_ms);
	if (cc & 1)
		writel(cc & ~1u, c->bar0 + NVME_REG_CC);
	deadline = jiffies + msecs_to_jiffies(to_ms);
	for (;;) {
		csts = readl(c->bar0 + NVME_REG_CSTS);
		if (csts == ~0u || !(csts & 1))
			break;
		if (time_after(jiffies, deadline)) {
			dev_warn(&c->pdev->dev, "CSTS.RDY still 1 %lu ms after CC.EN=0: bus mastering stays off\n",
				 to_ms);
			break;
		}
		usleep_range(1000, 2000);
	}
}

/* ---- address tables ------------------------------------------------------- */

/* Append the 4 KiB pages of [dma, dma + len) to the table at *pos,
 * skipping the first *skip bytes of the whole mapping. The table is a
 * kernel buffer, copied to the caller after c->lock is dropped. */
struct gnv_table_out {
	u64 *table;
	u64 pos;    /* entries written */
	u64 want;   /* entries wanted */
	u64 skip;   /* bytes still to skip */
};

static int gnv_emit(struct gnv_table_out *t, dma_addr_t dma, u64 len)
{
	u64 off;

	if ((dma | len) & (GPUNVME_KMOD_PAGE - 1))
		return -EINVAL; /* the caller's PRPs need whole 4 KiB pages */
	for (off = 0; off < len && t->pos < t->want; off += GPUNVME_KMOD_PAGE) {
		u64 a = dma + off;

		if (t->skip) {
			t->skip -= GPUNVME_KMOD_PAGE;
			continue;
		}
		t->table[t->pos++] = a;
	}
	return 0;
}

static int gnv_emit_sgt(struct gnv_table_out *t, struct sg_table *sgt)
{
	struct scatterlist *sg;
	int i, rc;

	for_each_sgtable_dma_sg(sgt, sg, i) {
		rc = gnv_emit(t, sg_dma_address(sg), sg_dma_len(sg));
		if (rc)
			return rc;
		if (t->pos == t->want)
			break;
		if (fatal_signal_pending(current))
			return -EINTR;
	}
	return t->pos == t->want ? 0 : -EINVAL;
}

/* ---- mappings --------------------------------------------------------------- */

static void gnv_unmap_one(struct gnv_map *m)
{
	struct device *dev = &m->c->pdev->dev;

	switch (m->kind) {
	case GPUNVME_KMOD_USER:
		if (m->sgt_mapped)
			dma_unmap_sgtable(dev, &m->sgt, DMA_BIDIRECTIONAL, 0);
		sg_free_table(&m->sgt);
		if (m->pages) {
			unpin_user_pages_dirty_lock(m->pages, m->npages, true);
			kvfree(m->pages);
		}
		if (m->mm) {
			account_locked_vm(m->mm, m->locked, false);
			mmdrop(m->mm);
		}
		if (m->pinned) /* 0 unless counted, under c->lock */
			m->c->pinned -= m->pinned;
		break;
	case GPUNVME_KMOD_DMABUF:
		if (m->dsgt) {
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 2, 0)
			dma_buf_unmap_attachment_unlocked(m->att, m->dsgt, DMA_BIDIRECTIONAL);
#else
			dma_buf_unmap_attachment(m->att, m->dsgt, DMA_BIDIRECTIONAL);
#endif
		}
		if (m->att)
			dma_buf_detach(m->dbuf, m->att);
		if (m->dbuf)
			dma_buf_put(m->dbuf);
		break;
	case GPUNVME_KMOD_PEER:
		if (m->peer_dma)
			dma_unmap_resource(dev, m->peer_dma, m->len, DMA_BIDIRECTIONAL, 0);
		pci_dev_put(m->peer);
		break;
	case GPUNVME_KMOD_NVP2P:
		if (m->nv_held && !m->nv_revoked) {
			if (m->nv_dma)
				m->nv.dma_unmap(m->c->pdev, m->nv_table, m->nv_dma);
			if (m->nv_table)
				m->nv.put_pages(0, 0, m->nv_va, m->nv_table);
		}
		if (m->nv_held)
			gnv_nvp2p_put();
		break;
	}
	kfree(m);
}

/*
 * Pin the caller's pages, without c->lock: faulting them in may wait as long
 * as the caller likes (userfaultfd, FUSE). Charged to RLIMIT_MEMLOCK unless
 * CAP_IPC_LOCK (account_locked_vm).
 */
static int gnv_pin_user(struct gnv_map *m, struct gpunvme_kmod_map *a)
{
	unsigned long n = a->len >> PAGE_SHIFT;
	long got, done = 0;
	u64 end;
	int rc = 0;

	if (a->addr & (PAGE_SIZE - 1) || a->len & (PAGE_SIZE - 1))
		return -EINVAL;
	/*
	 * Refused here, before anything is charged or pinned: a range that
	 * wraps or reaches past the user address space. GUP's own answer
	 * differs between kernels (6.12: -EOVERFLOW for a wrapping range).
	 */
	if (check_add_overflow(a->addr, a->len, &end) ||
	    !access_ok(u64_to_user_ptr(a->addr), a->len))
		return -EFAULT;
	if (pin_limit_mb && a->len > (u64)pin_limit_mb << 20)
		return -ENOMEM;
	rc = account_locked_vm(current->mm, n, true);
	if (rc)
		return rc;
	m->mm = current->mm;
	m->locked = n;
	mmgrab(m->mm);
	/* sized by the caller: a failure is its error, not a kernel warning */
	m->pages = kvmalloc_array(n, sizeof(*m->pages), GFP_KERNEL | __GFP_NOWARN);
	if (!m->pages)
		return -ENOMEM;
	while (done < (long)n) {
		int chunk = (int)min_t(long, (long)n - done, 1L << 16);

		got = pin_user_pages_fast(a->addr + ((unsigned long)done << PAGE_SHIFT), chunk,
					  FOLL_WRITE | FOLL_LONGTERM, m->pages + done);
		if (got <= 0) {
			rc = got ? (int)got : -EFAULT;
			break;
		}
		done += got;
		if (fatal_signal_pending(current)) {
			rc = -EINTR;
			break;
		}
	}
	if (done < (long)n) {
		unpin_user_pages(m->pages, done);
		kvfree(m->pages);
		m->pages = NULL;
		return rc;
	}
	m->npages = n;
	return 0;
}

/* The pinned pages for the device; c->lock held. */
static int gnv_map_user(struct gnv_ctrl *c, struct gnv_map *m, struct gpunvme_kmod_map *a,
			struct gnv_table_out *t)
{
	int rc;

	if (pin_limit_mb && c->pinned + a->len > (u64)pin_limit_mb << 20)
		return -ENOMEM;
	m->pinned = a->len;
	c->pinned += a->len;
	rc = sg_alloc_table_from_pages(&m->sgt, m->pages, m->npages, 0, a->len, GFP_KERNEL);
	if (rc)
		return rc;
	rc = dma_map_sgtable(&c->pdev->dev, &m->sgt, DMA_BIDIRECTIONAL, 0);
	if (rc)
		return rc;
	m->sgt_mapped = true;
	return gnv_emit_sgt(t, &m->sgt);
}

static int gnv_map_dmabuf(struct gnv_ctrl *c, struct gnv_map *m, struct gpunvme_kmod_map *a,
			  struct gnv_table_out *t)
{
	struct sg_table *sgt;

	if (a->addr & (GPUNVME_KMOD_PAGE - 1))
		return -EINVAL;
	m->dbuf = dma_buf_get(a->fd);
	if (IS_ERR(m->dbuf)) {
		int rc = (int)PTR_ERR(m->dbuf);

		m->dbuf = NULL;
		return rc;
	}
	if (a->addr > m->dbuf->size || a->len > m->dbuf->size - a->addr)
		return -ERANGE;
	/* A static attachment: the exporter pins the buffer for as long as
	 * it is attached (no move_notify to honour: the controller cannot
	 * pause its DMA for a move). */
	m->att = dma_buf_attach(m->dbuf, &c->pdev->dev);
	if (IS_ERR(m->att)) {
		int rc = (int)PTR_ERR(m->att);

		m->att = NULL;
		return rc;
	}
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 2, 0)
	sgt = dma_buf_map_attachment_unlocked(m->att, DMA_BIDIRECTIONAL);
#else
	sgt = dma_buf_map_attachment(m->att, DMA_BIDIRECTIONAL);
#endif
	if (IS_ERR(sgt))
		return (int)PTR_ERR(sgt);
	m->dsgt = sgt;
	t->skip = a->addr;
	return gnv_emit_sgt(t, sgt);
}

static int gnv_map_peer(struct gnv_ctrl *c, struct gnv_map *m, struct gpunvme_kmod_map *a,
			struct gnv_table_out *t)
{
	unsigned int dom, bus, slot, fn;
	char name[sizeof(a->peer) + 1];
	phys_addr_t phys;
	u16 cmd;

	/* Another device's registers or memory: as powerful as /dev/mem. */
	if (!capable(CAP_SYS_RAWIO))
		return -EPERM;
	memcpy(name, a->peer, sizeof(a->peer));
	name[sizeof(a->peer)] = 0;
	if (sscanf(name, "%x:%x:%x.%x", &dom, &bus, &slot, &fn) != 4 || bus > 255 || slot > 31 || fn > 7)
		return -EINVAL;
	if (a->bar >= PCI_STD_NUM_BARS)
		return -EINVAL;
	m->peer = pci_get_domain_bus_and_slot((int)dom, bus, PCI_DEVFN(slot, fn));
	if (!m->peer)
		return -ENODEV;
	if (m->peer == c->pdev)
		return -EINVAL;
	if (!(pci_resource_flags(m->peer, a->bar) & IORESOURCE_MEM))
		return -ENXIO;
	if (a->addr & (GPUNVME_KMOD_PAGE - 1) || a->addr > pci_resource_len(m->peer, a->bar) ||
	    a->len > pci_resource_len(m->peer, a->bar) - a->addr)
		return -ERANGE;
	pci_read_config_word(m->peer, PCI_COMMAND, &cmd);
	if (!(cmd & PCI_COMMAND_MEMORY))
		return -EHOSTDOWN; /* the peer decodes no memory: nobody enabled it */
	phys = pci_resource_start(m->peer, a->bar) + a->addr;
	m->peer_dma = dma_map_resource(&c->pdev->dev, phys, a->len, DMA_BIDIRECTIONAL, 0);
	if (dma_mapping_error(&c->pdev->dev, m->peer_dma)) {
		m->peer_dma = 0;
		return -EIO;
	}
	return gnv_emit(t, m->peer_dma, a->len);
}

/* NVIDIA revokes the pages (cudaFree, process exit): the controller must
 * not touch them any more, so it is stopped first. */
static void gnv_nvp2p_revoke(void *data)
{
	struct gnv_map *m = data;

	gnv_disable(m->c);
	m->nv_revoked = true;
	if (m->nv_dma)
		m->nv.free_dma(m->nv_dma);
	m->nv.free_table(m->nv_table);
	dev_warn(&m->c->pdev->dev, "NVIDIA revoked P2P pages at 0x%llx: controller disabled\n", m->nv_va);
}

static int gnv_map_nvp2p(struct gnv_ctrl *c, struct gnv_map *m, struct gpunvme_kmod_map *a,
			 struct gnv_table_out *t)
{
	static const u64 psz[] = { 4096, 65536, 131072 };
	const char *missing = NULL;
	u64 page;
	u32 i;
	int rc;

	/* NVIDIA's P2P pages are 64 KiB: the range must be whole pages */
	if ((a->addr | a->len) & 0xffff)
		return -EINVAL;
	rc = gnv_nvp2p_get(&m->nv, &missing);
	if (rc) {
		dev_info(&c->pdev->dev, "nvidia_p2p: %s not exported (nvidia.ko not loaded, or this kernel's symbol_get refuses it)\n",
			 missing);
		return rc;
	}
	m->nv_held = true;
	m->nv_va = a->addr;
	rc = m->nv.get_pages(0, 0, a->addr, a->len, &m->nv_table, gnv_nvp2p_revoke, m);
	if (rc) {
		m->nv_table = NULL;
		return rc;
	}
	rc = m->nv.dma_map(c->pdev, m->nv_table, &m->nv_dma);
	if (rc) {
		m->nv_dma = NULL;
		return rc;
	}
	if (m->nv_dma->page_size_type >= ARRAY_SIZE(psz))
		return -EINVAL;
	page = psz[m->nv_dma->page_size_type];
	for (i = 0; i < m->nv_dma->entries; i++) {
		rc = gnv_emit(t, m->nv_dma->dma_addresses[i], page);
		if (rc)
			return rc;
	}
	return t->pos == t->want ? 0 : -EINVAL;
}

/*
 * Whether the controller can be processing commands: false when bus
 * mastering is off (no memory requests at all, PCIe base 6.0, 7.5.1.1.3)
 * or when CC.EN=0 and CSTS.RDY=0 (reset complete: every queue deleted and
 * every command aborted, NVMe base 2.0, 3.7.2). A controller that reads
 * all ones is gone or broken: not trusted to be idle. c->lock held.
 */
static bool gnv_running(struct gnv_ctrl *c)
{
	u16 cmd = 0;
	u32 cc, csts;

	pci_read_config_word(c->pdev, PCI_COMMAND, &cmd);
	if (!(cmd & PCI_COMMAND_MASTER))
		return false;
	cc = readl(c->bar0 + NVME_REG_CC);
	csts = readl(c->bar0 + NVME_REG_CSTS);
	return cc == ~0u || (cc & 1) || (csts & 1);
}

/* Release the retired mappings; only when no command can reach them. */
static void gnv_reap(struct gnv_ctrl *c, bool stopped)
{
	struct gnv_map *m, *tmp;

	if (list_empty(&c->retired) || (!stopped && gnv_running(c)))
		return;
	list_for_each_entry_safe(m, tmp, &c->retired, node) {
		list_del(&m->node);
		gnv_unmap_one(m);
	}
}

/* Take mapping @handle off the list: retired if the controller may still
 * use it, released now otherwise. c->lock held. */
static int gnv_unmap_locked(struct gnv_ctrl *c, u32 handle)
{
	struct gnv_map *m;

	list_for_each_entry(m, &c->maps, node) {
		if (m->handle != handle)
			continue;
		list_del(&m->node);
		if (gnv_running(c)) {
			list_add_tail(&m->node, &c->retired);
		} else {
			gnv_unmap_one(m);
			gnv_reap(c, true);
		}
		return 0;
	}
	return -ENOENT;
}

static long gnv_ioctl_map(struct gnv_ctrl *c, void __user *uarg)
{
	struct gpunvme_kmod_map a;
	struct gnv_table_out t;
	struct gnv_map *m;
	u64 *table;
	u32 handle;
	int rc;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (!a.len || a.len & (GPUNVME_KMOD_PAGE - 1) || a.len > (u64)max_map_mb << 20)
		return -EINVAL;
	if (a.table_entries < a.len / GPUNVME_KMOD_PAGE) {
		a.table_entries = a.len / GPUNVME_KMOD_PAGE;
		if (copy_to_user(uarg, &a, sizeof(a)))
			return -EFAULT;
		return -ENOSPC;
	}
	if (a.kind < GPUNVME_KMOD_USER || a.kind > GPUNVME_KMOD_NVP2P)
		return -EINVAL;
	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m)
		return -ENOMEM;
	/* as large as the page array of a USER map; copied out unlocked */
	table = kvmalloc_array(a.len / GPUNVME_KMOD_PAGE, sizeof(*table), GFP_KERNEL | __GFP_NOWARN);
	if (!table) {
		kfree(m);
		return -ENOMEM;
	}
	m->c = c;
	m->kind = a.kind;
	m->len = a.len;
	t = (struct gnv_table_out){ table, 0, a.len / GPUNVME_KMOD_PAGE, 0 };

	if (a.kind == GPUNVME_KMOD_USER) {
		rc = gnv_pin_user(m, &a);
		if (rc) {
			gnv_unmap_one(m); /* nothing mapped for the device yet */
			goto out;
		}
	}
	mutex_lock(&c->lock);
	if (c->removed) {
		rc = -ENODEV;
	} else {
		gnv_reap(c, false);
		switch (a.kind) {
		case GPUNVME_KMOD_USER:
			rc = gnv_map_user(c, m, &a, &t);
			break;
		case GPUNVME_KMOD_DMABUF:
			rc = gnv_map_dmabuf(c, m, &a, &t);
			break;
		case GPUNVME_KMOD_PEER:
			rc = gnv_map_peer(c, m, &a, &t);
			break;
		default:
			rc = gnv_map_nvp2p(c, m, &a, &t);
			break;
		}
	}
	if (rc) {
		gnv_unmap_one(m);
		mutex_unlock(&c->lock);
		goto out;
	}
	m->handle = ++c->next_handle;
	if (!m->handle)
		m->handle = ++c->next_handle;
	handle = m->handle;
	list_add_tail(&m->node, &c->maps);
	mutex_unlock(&c->lock);
	/*
	 * m may be unmapped by another thread from here on: only handle is
	 * used. A caller that cannot be told the table or the handle (the
	 * table or the argument is not writable) gets nothing: the mapping is
	 * undone, so a failed MAP never leaves pages pinned until close.
	 */
	a.handle = handle;
	if (copy_to_user(u64_to_user_ptr(a.table), table, t.want * sizeof(*table)) ||
	    copy_to_user(uarg, &a, sizeof(a))) {
		mutex_lock(&c->lock);
		if (!c->removed)
			gnv_unmap_locked(c, handle);
		mutex_unlock(&c->lock);
		rc = -EFAULT;
	}
out:
	kvfree(table);
	return rc;
}

static long gnv_ioctl_unmap(struct gnv_ctrl *c, u32 handle)
{
	int rc;

	mutex_lock(&c->lock);
	rc = c->removed ? -ENODEV : gnv_unmap_locked(c, handle);
	mutex_unlock(&c->lock);
	return rc;
}

static long gnv_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	struct gnv_ctrl *c = f->private_data;
	void __user *uarg = (void __user *)arg;
	long rc = 0;

	/* Each command checks c->removed under c->lock: once gnv_remove has
	 * run, BAR0 is unmapped and the device may be gone. */
	switch (cmd) {
	case GPUNVME_KMOD_INFO: {
		struct gpunvme_kmod_info info = {
			.version = GPUNVME_KMOD_VERSION,
			.bar0_len = c->bar0_len,
			.max_map = (u64)max_map_mb << 20,
			.pin_limit = (u64)pin_limit_mb << 20,
		};
		void *sym = __symbol_get("nvidia_p2p_get_pages");

		if (sym) {
			info.nvp2p = 1;
			__symbol_put("nvidia_p2p_get_pages");
		}
		mutex_lock(&c->lock);
		if (c->removed) {
			rc = -ENODEV;
		} else {
			gnv_reap(c, false);
			info.iommu = gnv_iommu_translates(c->pdev);
			info.pinned = c->pinned;
		}
		mutex_unlock(&c->lock);
		if (rc)
			return rc;
		return copy_to_user(uarg, &info, sizeof(info)) ? -EFAULT : 0;
	}
	case GPUNVME_KMOD_MAP:
		return gnv_ioctl_map(c, uarg);
	case GPUNVME_KMOD_UNMAP: {
		u32 h;

		if (get_user(h, (u32 __user *)uarg))
			return -EFAULT;
		return gnv_ioctl_unmap(c, h);
	}
	case GPUNVME_KMOD_DISABLE:
		mutex_lock(&c->lock);
		if (c->removed) {
			rc = -ENODEV;
		} else {
			gnv_disable(c);
			gnv_reap(c, true); /* bus mastering is off here */
			pci_set_master(c->pdev);
		}
		mutex_unlock(&c->lock);
		return rc;
	}
	return -ENOTTY;
}

/*
 * BAR0 is mapped when first touched, not in gnv_mmap: mmap links the new
 * vma into the file's address space only after ->mmap returns, so an unbind
 * in between would zap (unmap_mapping_range) before the vma is there and
 * leave the registers of a device this driver no longer owns mapped until
 * munmap. A fault takes c->lock, which gnv_remove holds while it sets
 * c->removed and zaps: either the fault inserts first and the zap takes it
 * away, or it sees c->removed and the access gets SIGBUS. Lock order:
 * mmap_lock (the fault's caller) before c->lock; nothing takes mmap_lock
 * under c->lock (user memory is pinned and copied without it).
 *
 * The whole vma is inserted on the first fault, as vfio-pci does: NVIDIA's
 * registration of I/O memory (cudaHostRegister with IoMemory) reads every
 * page's PFN from the page table (follow_pte), so once the owner has read
 * one register every page is present. vmf_insert_pfn leaves a page another
 * thread's fault inserted meanwhile as it is (VM_FAULT_NOPAGE).
 */
static vm_fault_t gnv_bar_fault(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	struct gnv_ctrl *c = vma->vm_private_data;
	vm_fault_t ret = VM_FAULT_SIGBUS;
	unsigned long addr;

	mutex_lock(&c->lock);
	if (!c->removed) {
		for (addr = vma->vm_start; addr < vma->vm_end; addr += PAGE_SIZE) {
			ret = vmf_insert_pfn(vma, addr, vma->vm_pgoff + ((addr - vma->vm_start) >> PAGE_SHIFT));
			if (ret != VM_FAULT_NOPAGE)
				break;
		}
	}
	mutex_unlock(&c->lock);
	return ret;
}

static const struct vm_operations_struct gnv_bar_vm_ops = {
	.fault = gnv_bar_fault,
};

static int gnv_mmap(struct file *f, struct vm_area_struct *vma)
{
	struct gnv_ctrl *c = f->private_data;
	unsigned long len = vma->vm_end - vma->vm_start;

	/* a hint only (unlocked: this runs under mmap_lock, which the fault
	 * takes before c->lock): gnv_bar_fault decides under the lock */
	if (READ_ONCE(c->removed))
		return -ENODEV;
	if (vma->vm_pgoff || len > PAGE_ALIGN(c->bar0_len))
		return -EINVAL;
	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	/*
	 * Registers, not memory: no struct pages (PFNMAP), never in a core
	 * dump, never grown by mremap. A fork() child must not keep the
	 * registers (and with them the open file, which delays the teardown
	 * past the owner's death).
	 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
	vm_flags_set(vma, VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY);
#else
	vma->vm_flags |= VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY;
#endif
	/*
	 * vm_pgoff is the BAR's page frame number, as for a mapping of
	 * /sys/bus/pci/devices/.../resource0: code that takes the PFN of a
	 * VM_PFNMAP area from vm_pgoff (NVIDIA's drivers of kernels without
	 * follow_pfn() and follow_pte()) finds the right one; the fault
	 * inserts from it.
	 */
	vma->vm_pgoff = c->bar0_start >> PAGE_SHIFT;
	vma->vm_page_prot = pgprot_noncached(vma->vm_page_prot);
	vma->vm_private_data = c;
	vma->vm_ops = &gnv_bar_vm_ops;
	return 0;
}

static struct gnv_ctrl *gnv_ctrls[GNV_MAX_CTRL];
static DEFINE_MUTEX(gnv_ctrls_lock);

static int gnv_open(struct inode *inode, struct file *f)
{
	struct gnv_ctrl *c;
	int rc = 0;

	mutex_lock(&gnv_ctrls_lock);
	c = gnv_ctrls[iminor(inode)];
	if (!c) {
		rc = -ENODEV;
	} else {
		/* gnv_remove clears the slot (under gnv_ctrls_lock) before it
		 * sets c->removed: c is not removed while this holds both. */
		mutex_lock(&c->lock);
		if (c->busy) {
			rc = -EBUSY; /* two drivers on one controller corrupt each other's queues */
		} else {
			c->busy = true;
			/* c->pdev outlives an unbind while the file is open */
			pci_dev_get(c->pdev);
			pci_set_master(c->pdev);
			c->mapping = inode->i_mapping;
		}
		mutex_unlock(&c->lock);
	}
	mutex_unlock(&gnv_ctrls_lock);
	if (rc)
		return rc;
	f->private_data = c;
	return 0;
}

/* Disable, then drop every mapping, retired ones too. c->lock held. */
static void gnv_teardown(struct gnv_ctrl *c)
{
	struct gnv_map *m, *tmp;

	/* Disable first: unmapping or unpinning while the controller may still
	 * DMA would let writes land in pages the kernel hands to others. */
	gnv_disable(c);
	gnv_reap(c, true);
	list_for_each_entry_safe(m, tmp, &c->maps, node) {
		list_del(&m->node);
		gnv_unmap_one(m);
	}
}

static int gnv_release(struct inode *inode, struct file *f)
{
	struct gnv_ctrl *c = f->private_data;
	struct pci_dev *pdev = c->pdev;
	bool gone;

	mutex_lock(&c->lock);
	gone = c->removed;
	if (!gone)
		gnv_teardown(c); /* else gnv_remove did it */
	c->busy = false;
	c->mapping = NULL;
	mutex_unlock(&c->lock);
	/* gnv_remove saw busy and left c to this file */
	if (gone)
		kfree(c);
	pci_dev_put(pdev);
	return 0;
}

static const struct file_operations gnv_fops = {
	.owner = THIS_MODULE,
	.open = gnv_open,
	.release = gnv_release,
	.unlocked_ioctl = gnv_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = gnv_mmap,
};

/* ---- PCI driver ----------------------------------------------------------- */

static struct pci_driver gnv_driver;

/* driver_override names this driver (Kbuild: GNV_DEV_DRIVER_OVERRIDE). */
static bool gnv_requested(struct pci_dev *pdev)
{
#ifdef GNV_DEV_DRIVER_OVERRIDE
	return device_match_driver_override(&pdev->dev, &gnv_driver.driver) > 0;
#else
	return pdev->driver_override && !strcmp(pdev->driver_override, KBUILD_MODNAME);
#endif
}

static int gnv_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct gnv_ctrl *c;
	int rc;

	/* Only when asked: driver_override names this driver (the id table
	 * below matches every NVMe controller, which would otherwise race
	 * the nvme driver for the boot disk). */
	if (!gnv_requested(pdev))
		return -ENODEV;
	c = kzalloc(sizeof(*c), GFP_KERNEL);
	if (!c)
		return -ENOMEM;
	c->pdev = pdev;
	mutex_init(&c->lock);
	INIT_LIST_HEAD(&c->maps);
	INIT_LIST_HEAD(&c->retired);
	rc = pci_enable_device_mem(pdev);
	if (rc)
		goto free;
	rc = pci_request_mem_regions(pdev, KBUILD_MODNAME);
	if (rc)
		goto disable;
	rc = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (rc)
		goto release;
	c->bar0_start = pci_resource_start(pdev, 0);
	c->bar0_len = pci_resource_len(pdev, 0);
	if (c->bar0_len < 0x2000) {
		rc = -ENODEV;
		goto release;
	}
	c->bar0 = pci_iomap(pdev, 0, 0x2000);
	if (!c->bar0) {
		rc = -ENOMEM;
		goto release;
	}
	c->minor = ida_alloc_max(&gnv_minors, GNV_MAX_CTRL - 1, GFP_KERNEL);
	if (c->minor < 0) {
		rc = c->minor;
		goto unmap;
	}
	c->cdev = cdev_alloc();
	if (!c->cdev) {
		rc = -ENOMEM;
		goto ida;
	}
	c->cdev->ops = &gnv_fops;
	c->cdev->owner = THIS_MODULE;
	rc = cdev_add(c->cdev, MKDEV(MAJOR(gnv_devt), c->minor), 1);
	if (rc) {
		kobject_put(&c->cdev->kobj);
		goto ida;
	}
	mutex_lock(&gnv_ctrls_lock);
	gnv_ctrls[c->minor] = c;
	mutex_unlock(&gnv_ctrls_lock);
	c->dev = device_create(gnv_class, &pdev->dev, MKDEV(MAJOR(gnv_devt), c->minor), c, "gpunvme!%s",
			       pci_name(pdev));
	if (IS_ERR(c->dev)) {
		rc = (int)PTR_ERR(c->dev);
		goto cdev;
	}
	pci_set_drvdata(pdev, c);
	dev_info(&pdev->dev, "/dev/gpunvme/%s, BAR0 %pa bytes, IOMMU %s\n", pci_name(pdev), &c->bar0_len,
		 gnv_iommu_translates(pdev) ? "translating" : "off or passthrough");
	return 0;
cdev:
	mutex_lock(&gnv_ctrls_lock);
	gnv_ctrls[c->minor] = NULL;
	mutex_unlock(&gnv_ctrls_lock);
	cdev_del(c->cdev);
ida:
	ida_free(&gnv_minors, c->minor);
unmap:
	pci_iounmap(pdev, c->bar0);
release:
	pci_release_mem_regions(pdev);
disable:
	pci_disable_device(pdev);
free:
	kfree(c);
	return rc;
}

static void gnv_remove(struct pci_dev *pdev)
{
	struct gnv_ctrl *c = pci_get_drvdata(pdev);
	void __iomem *bar0 = c->bar0;
	int minor = c->minor;
	bool busy;

	device_destroy(gnv_class, MKDEV(MAJOR(gnv_devt), minor));
	mutex_lock(&gnv_ctrls_lock);
	gnv_ctrls[minor] = NULL;
	mutex_unlock(&gnv_ctrls_lock);
	cdev_del(c->cdev);
	/* An open file keeps the module (cdev owner), so the driver is only
	 * unbound through sysfs (or the device removed) while open: stop the
	 * device, drop mappings, take BAR0 away from the process (a later
	 * access gets SIGBUS). Once c->removed is set and c->lock dropped, an
	 * open file's gnv_release frees c: c is not touched after. */
	mutex_lock(&c->lock);
	c->removed = true;
	busy = c->busy;
	if (busy) {
		gnv_teardown(c);
		if (c->mapping)
			unmap_mapping_range(c->mapping, 0, 0, 1);
	}
	mutex_unlock(&c->lock);
	pci_iounmap(pdev, bar0);
	pci_release_mem_regions(pdev);
	pci_disable_device(pdev);
	ida_free(&gnv_minors, minor);
	if (!busy)
		kfree(c);
}

static const struct pci_device_id gnv_ids[] = {
	{ PCI_DEVICE_CLASS(PCI_CLASS_STORAGE_EXPRESS, 0xffffff) },
	{ 0 }
};
/* no MODULE_DEVICE_TABLE: never autoloaded for a controller */

static struct pci_driver gnv_driver = {
	.name = KBUILD_MODNAME,
	.id_table = gnv_ids,
	.probe = gnv_probe,
	.remove = gnv_remove,
};

/* The device is named "gpunvme!BDF": devtmpfs makes that /dev/gpunvme/BDF. */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 2, 0)
static char *gnv_devnode(const struct device *dev, umode_t *mode)
#else
static char *gnv_devnode(struct device *dev, umode_t *mode)
#endif
{
	if (mode)
		*mode = 0600; /* root only; chown/chmod the node to grant a user */
	return NULL;
}

static int __init gnv_init(void)
{
	int rc = alloc_chrdev_region(&gnv_devt, 0, GNV_MAX_CTRL, KBUILD_MODNAME);

	if (rc)
		return rc;
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 4, 0)
	gnv_class = class_create(KBUILD_MODNAME);
#else
	gnv_class = class_create(THIS_MODULE, KBUILD_MODNAME);
#endif
	if (IS_ERR(gnv_class)) {
		rc = (int)PTR_ERR(gnv_class);
		goto chr;
	}
	gnv_class->devnode = gnv_devnode;
	rc = pci_register_driver(&gnv_driver);
	if (rc)
		goto cls;
	return 0;
cls:
	class_destroy(gnv_class);
chr:
	unregister_chrdev_region(gnv_devt, GNV_MAX_CTRL);
	return rc;
}

static void __exit gnv_exit(void)
{
	pci_unregister_driver(&gnv_driver);
	class_destroy(gnv_class);
	unregister_chrdev_region(gnv_devt, GNV_MAX_CTRL);
	ida_destroy(&gnv_minors);
}

module_init(gnv_init);
module_exit(gnv_exit);
MODULE_LICENSE("Dual BSD/GPL");
MODULE_DESCRIPTION("gpu-nvme-direct: NVMe controller owner with dma-buf, peer-BAR and user-memory DMA mapping");
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 13, 0)
MODULE_IMPORT_NS("DMA_BUF");
#else
MODULE_IMPORT_NS(DMA_BUF);
#endif
