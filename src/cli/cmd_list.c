/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme list: NVMe controllers (class 0x010802) and NVIDIA GPUs (vendor
 * 0x10de, class 0x0300 VGA or 0x0302 3D) on the PCI bus, from sysfs, with
 * the bound driver, IOMMU group, link speed/width and NUMA node. Touches no
 * device. GPUNVME_SYSFS=DIR reads DIR instead of /sys (tests).
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme/pci.h"
#include "util.h"

#define MAX_DEV 256
#define NVIDIA 0x10de

static void help(void)
{
	printf("usage: gpunvme list [--json]\n"
	       "\n"
	       "NVMe controllers and NVIDIA GPUs on the PCI bus, read from sysfs: address,\n"
	       "vendor:device, bound driver, IOMMU group, PCIe link, NUMA node, and the URI\n"
	       "to open a controller with (vfio: when bound to vfio-pci, uio: when bound to\n"
	       "uio_pci_generic; a controller bound to the kernel nvme driver must be\n"
	       "rebound first). An empty table is not an error.\n"
	       "\n"
	       "  -j, --json           JSON output\n"
	       "  -o, --output-format  normal|json\n"
	       "  -h, --help           this text\n"
	       "\n"
	       "environment: GPUNVME_SYSFS=DIR reads DIR instead of /sys.\n");
}

struct dev {
	struct gpunvme_pci_info pi;
	char max_speed[64];
	int max_width;
	char kname[256]; /* nvme0, when the kernel driver owns it */
};

static int cmp_dev(const void *a, const void *b)
{
	return strcmp(((const struct dev *)a)->pi.bdf, ((const struct dev *)b)->pi.bdf);
}

static void extra(struct dev *d)
{
	char buf[64];
	d->max_width = 0;
	d->max_speed[0] = 0;
	if (!gpunvme_pci_read_attr(d->pi.bdf, "max_link_speed", buf, sizeof(buf)) &&
	    strcmp(buf, "Unknown") != 0)
		snprintf(d->max_speed, sizeof(d->max_speed), "%s", buf);
	if (!gpunvme_pci_read_attr(d->pi.bdf, "max_link_width", buf, sizeof(buf)))
		d->max_width = atoi(buf);
	/* kernel nvme driver: <dev>/nvme/nvmeN */
	d->kname[0] = 0;
	char path[1200];
	snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/nvme", gpunvme_pci_sysfs_root(), d->pi.bdf);
	DIR *dir = opendir(path);
	if (dir) {
		struct dirent *de;
		while ((de = readdir(dir)))
			if (!strncmp(de->d_name, "nvme", 4)) {
				snprintf(d->kname, sizeof(d->kname), "%s", de->d_name);
				break;
			}
		closedir(dir);
	}
}

static const char *uri_scheme(const struct dev *d)
{
	return gpunvme_pci_uri_scheme(d->pi.driver);
}

/* "8.0 GT/s PCIe" -> "8.0GT/s" */
static const char *short_speed(const char *s, char *buf, size_t len)
{
	if (!*s)
		return "?";
	snprintf(buf, len, "%s", s);
	char *p = strstr(buf, " PCIe");
	if (p)
		*p = 0;
	p = strstr(buf, " GT/s");
	if (p)
		memmove(p, p + 1, strlen(p));
	return buf;
}

static void link_str(const struct dev *d, char *out, size_t len)
{
	char a[32], b[32];
	if (!d->pi.link_speed[0] && !d->pi.link_width) {
		snprintf(out, len, "-");
		return;
	}
	int n = snprintf(out, len, "%s x%d", short_speed(d->pi.link_speed, a, sizeof(a)), d->pi.link_width);
	if ((d->max_speed[0] && strcmp(d->max_speed, d->pi.link_speed)) ||
	    (d->max_width && d->max_width != d->pi.link_width))
		snprintf(out + n, len - (size_t)n, " (max %s x%d)",
			 short_speed(d->max_speed, b, sizeof(b)), d->max_width);
}

static void print_table(const char *title, const struct dev *v, int n, bool nvme)
{
	printf("%s:\n", title);
	printf("%-13s %-9s %-16s %-5s %-30s %-4s %s\n", "BDF", "VID:DID", "Driver", "IOMMU",
	       "Link", "NUMA", nvme ? "URI" : "Class");
	for (int i = 0; i < n; i++) {
		const struct dev *d = &v[i];
		char grp[16], link[160], numa[16], last[300];
		snprintf(grp, sizeof(grp), d->pi.iommu_group >= 0 ? "%d" : "-", d->pi.iommu_group);
		snprintf(numa, sizeof(numa), d->pi.numa_node >= 0 ? "%d" : "-", d->pi.numa_node);
		link_str(d, link, sizeof(link));
		if (nvme) {
			const char *s = uri_scheme(d);
			if (s)
				snprintf(last, sizeof(last), "%s:%s", s, d->pi.bdf);
			else if (d->kname[0])
				snprintf(last, sizeof(last), "- (kernel %s)", d->kname);
			else
				snprintf(last, sizeof(last), "-");
		} else {
			snprintf(last, sizeof(last), "%s",
				 (d->pi.class_code >> 8) == 0x0302 ? "3D" : "VGA");
		}
		printf("%-13s %04x:%04x %-16s %-5s %-30s %-4s %s\n", d->pi.bdf, d->pi.vendor,
		       d->pi.device, d->pi.driver[0] ? d->pi.driver : "-", grp, link, numa, last);
	}
	if (n == 0)
		printf("(none)\n");
}

static void json_devs(struct cli_json *j, const char *key, const struct dev *v, int n, bool nvme)
{
	char buf[64];
	cj_arr_begin(j, key);
	for (int i = 0; i < n; i++) {
		const struct dev *d = &v[i];
		cj_obj_begin(j, NULL);
		cj_str(j, "bdf", d->pi.bdf);
		cj_hex(j, "vendor", d->pi.vendor, 4);
		cj_hex(j, "device", d->pi.device, 4);
		cj_hex(j, "class", d->pi.class_code, 6);
		if (d->pi.driver[0])
			cj_str(j, "driver", d->pi.driver);
		else
			cj_null(j, "driver");
		if (d->pi.iommu_group >= 0)
			cj_i64(j, "iommu_group", d->pi.iommu_group);
		else
			cj_null(j, "iommu_group");
		cj_str(j, "link_speed", d->pi.link_speed);
		cj_i64(j, "link_width", d->pi.link_width);
		cj_str(j, "max_link_speed", d->max_speed);
		cj_i64(j, "max_link_width", d->max_width);
		cj_i64(j, "numa_node", d->pi.numa_node);
		if (nvme) {
			const char *s = uri_scheme(d);
			if (s) {
				snprintf(buf, sizeof(buf), "%s:%s", s, d->pi.bdf);
				cj_str(j, "uri", buf);
			} else {
				cj_null(j, "uri");
			}
			if (d->kname[0])
				cj_str(j, "kernel_name", d->kname);
		}
		cj_obj_end(j);
	}
	cj_arr_end(j);
}

int cmd_list(int argc, char **argv)
{
	static const struct option lo[] = {
		{"json", no_argument, NULL, 'j'},
		{"output-format", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	bool json = false;
	int c;
	while ((c = cli_getopt(argc, argv, "jo:h", lo)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 'o':
			if (!strcmp(optarg, "json"))
				json = true;
			else if (!strcmp(optarg, "normal"))
				json = false;
			else
				return cli_usage_err("--output-format '%s': expected normal or json", optarg);
			break;
		case 'h': help(); return 0;
		default: return EXIT_USAGE;
		}
	}
	if (optind < argc)
		return cli_usage_err("unexpected argument '%s' (list takes no device)", argv[optind]);

	const char *root = getenv("GPUNVME_SYSFS");
	if (root && *root)
		gpunvme_pci_set_sysfs_root(root);

	static struct dev nv[MAX_DEV], gpu[MAX_DEV];
	int nn = 0, ng = 0;

	/* NVMe controllers through the bus library's own enumeration */
	static struct gpunvme_pci_info tmp[MAX_DEV];
	int rc = gpunvme_pci_list_nvme(tmp, MAX_DEV);
	if (rc < 0 && rc != -ENOENT)
		return cli_err(EXIT_RUNTIME, "reading %s/bus/pci/devices: %s", gpunvme_pci_sysfs_root(),
			       strerror(-rc));
	for (int i = 0; i < rc && i < MAX_DEV; i++) {
		nv[nn].pi = tmp[i];
		extra(&nv[nn]);
		nn++;
	}

	/* NVIDIA display controllers */
	char path[1200];
	snprintf(path, sizeof(path), "%s/bus/pci/devices", gpunvme_pci_sysfs_root());
	DIR *d = opendir(path);
	if (d) {
		struct dirent *de;
		while ((de = readdir(d)) && ng < MAX_DEV) {
			uint64_t cls, ven;
			if (de->d_name[0] == '.' || strlen(de->d_name) != 12)
				continue;
			if (gpunvme_pci_read_hex(de->d_name, "vendor", &ven) || ven != NVIDIA)
				continue;
			if (gpunvme_pci_read_hex(de->d_name, "class", &cls))
				continue;
			uint32_t base_sub = (uint32_t)(cls >> 8) & 0xffff;
			if (base_sub != 0x0300 && base_sub != 0x0302)
				continue;
			if (gpunvme_pci_info(de->d_name, &gpu[ng].pi))
				continue;
			extra(&gpu[ng]);
			ng++;
		}
		closedir(d);
		qsort(gpu, (size_t)ng, sizeof(gpu[0]), cmp_dev);
	}

	if (json) {
		struct cli_json j;
		cj_init(&j, stdout);
		cj_obj_begin(&j, NULL);
		json_devs(&j, "nvme", nv, nn, true);
		json_devs(&j, "gpus", gpu, ng, false);
		cj_obj_end(&j);
		cj_finish(&j);
	} else {
		print_table("NVMe controllers", nv, nn, true);
		printf("\n");
		print_table("NVIDIA GPUs", gpu, ng, false);
	}
	return 0;
}
