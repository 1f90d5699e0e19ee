/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme: command-line front end of the user-space NVMe driver, in the
 * manner of nvme-cli: `gpunvme <command> [URI] [options]`.
 *
 * Exit codes: 0 success, 1 runtime error, 2 usage error. Every error is one
 * line on stderr: "gpunvme: <command>: <what>: <why/fix>".
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

/* cmd_fs.c: files of ext4 / XFS file systems, no mount */
int cmd_ls(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_extents(int argc, char **argv);
int cmd_cat(int argc, char **argv);
/* cmd_load.c: model files into GPU memory */
int cmd_load(int argc, char **argv);
/* cmd_experts.c: the experts of a mixture-of-experts model */
int cmd_experts(int argc, char **argv);
/* cmd_doctor.c: can this machine run the GPU data path */
int cmd_doctor(int argc, char **argv);
/* cmd_fabrics.c: NVMe over TCP discovery */
int cmd_discover(int argc, char **argv);

#ifndef GPUNVME_VERSION
#define GPUNVME_VERSION "0.1.0"
#endif

struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

static const struct command commands[] = {
	{"list", cmd_list, "NVMe controllers and NVIDIA GPUs on the PCI bus (sysfs)"},
	{"doctor", cmd_doctor, "diagnose the GPU data path: tiers per GPU x NVMe pair, reasons, fixes"},
	{"discover", cmd_discover, "subsystems an NVMe/TCP target offers (discovery log page)"},
	{"id-ctrl", cmd_id_ctrl, "decoded Identify Controller data"},
	{"id-ns", cmd_id_ns, "decoded Identify Namespace data"},
	{"show-regs", cmd_show_regs, "decoded controller registers (BAR0)"},
	{"read", cmd_read, "read blocks into a file or stdout"},
	{"write", cmd_write, "write blocks from a file or stdin"},
	{"perf", cmd_perf, "I/O benchmark: IOPS, bandwidth, latency percentiles"},
	{"ls", cmd_ls, "list a directory of an ext4/XFS file system (no mount)"},
	{"stat", cmd_stat, "inode of a file in an ext4/XFS file system"},
	{"extents", cmd_extents, "a file's extents: LBAs on the namespace (decoders or --fiemap)"},
	{"cat", cmd_cat, "a file's bytes from an ext4/XFS file system to stdout"},
	{"load", cmd_load, "load a safetensors/GGUF model's tensors into GPU memory (no mount)"},
	{"experts", cmd_experts, "the experts of a mixture-of-experts model; --read: chosen ones, hashed"},
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gpunvme <command> [URI] [options]\n"
		"\n"
		"commands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f,
		"  %-10s %s\n"
		"  %-10s %s\n"
		"\n"
		"device URIs:\n"
		"  emu:SPEC           the embedded emulator, e.g. emu:ram:64M, emu:ram:1G?lbads=12&mdts=5,\n"
		"                     emu:/path/disk.img (an existing file), emu:null:4T\n"
		"  vfio:DDDD:BB:DD.F  a controller bound to vfio-pci\n"
		"  uio:DDDD:BB:DD.F   a controller bound to uio_pci_generic\n"
		"  pci:DDDD:BB:DD.F   whichever of the two its driver allows\n"
		"  tcp://HOST[:PORT]/SUBNQN[?opts]  a subsystem of an NVMe/TCP target (Linux nvmet, SPDK);\n"
		"                     opts: hostnqn=, hostid=, hdgst=1, ddgst=1, kato=MS, timeout=MS,\n"
		"                     nr_io_queues=N, queue_size=N (docs/nvme-tcp.md)\n"
		"  (ls, stat, extents, cat also take --image FILE instead of a URI)\n"
		"\n"
		"numbers: decimal or 0x hex; sizes also take K/M/G/T (powers of 1024).\n"
		"exit status: 0 success, 1 runtime error, 2 usage error.\n"
		"'gpunvme <command> --help' describes each command.\n",
		"help", "this text, or 'help <command>'", "version", "print the version");
}

/*
 * What a command printed through stdio must have arrived: a failed write
 * while it buffered sets only the stream's error flag (its errno is gone by
 * now), so a reader that went away is recognised by the pipe itself
 * (POLLERR on a pipe without readers) and ends quietly like EPIPE does.
 */
static int stdout_done(int rc)
{
	int e = fflush(stdout) ? errno : 0;
	if ((!e && !ferror(stdout)) || rc)
		return rc;
	struct pollfd p = {.fd = STDOUT_FILENO, .events = POLLOUT};
	if (e != EPIPE && poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP)))
		e = EPIPE;
	if (!e)
		return cli_err(EXIT_RUNTIME, "writing to stdout failed: the output is incomplete "
			       "(is the disk full?)");
	return cli_write_err(-e, "to stdout");
}

static int run_command(int argc, char **argv);

int main(int argc, char **argv)
{
	/* a closed pipe on stdout is an error we report, not a silent death */
	signal(SIGPIPE, SIG_IGN);
	return stdout_done(run_command(argc, argv));
}

static int run_command(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	const char *name = argv[1];
	if (!strcmp(name, "-h") || !strcmp(name, "--help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(name, "version") || !strcmp(name, "--version") || !strcmp(name, "-V")) {
		printf("gpunvme %s\n", GPUNVME_VERSION);
		return 0;
	}
	if (!strcmp(name, "help")) {
		if (argc < 3 || !strcmp(argv[2], "-h") || !strcmp(argv[2], "--help")) {
			usage(stdout);
			return 0;
		}
		for (size_t i = 0; i < NCOMMANDS; i++)
			if (!strcmp(argv[2], commands[i].name)) {
				char *hargv[] = {argv[2], "--help", NULL};
				cli_cmd = commands[i].name;
				optind = 0;
				return commands[i].fn(2, hargv);
			}
		return cli_err(EXIT_USAGE, "help: unknown command '%s' (see 'gpunvme --help')", argv[2]);
	}
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(name, commands[i].name)) {
			cli_cmd = commands[i].name;
			optind = 0;  /* full getopt re-initialisation */
			return commands[i].fn(argc - 1, argv + 1);
		}
	if (name[0] == '-')
		return cli_err(EXIT_USAGE, "unknown option '%s' (a command comes first; see 'gpunvme --help')",
			       name);
	return cli_err(EXIT_USAGE, "unknown command '%s' (see 'gpunvme --help')", name);
}
