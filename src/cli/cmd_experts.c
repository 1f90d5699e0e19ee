/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme experts URI PATH: the experts of a mixture-of-experts model (the
 * expert index, moe.h) and, with --read, chosen experts read through the
 * expert cache on the CPU tier, each with the SHA-256 of its bytes (its
 * projections in index order, back to back) to compare with another reader.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme/loader.h"
#include "gpunvme/modelset.h"
#include "gpunvme/moe.h"
#include "gpunvme/sha256.h"
#include "util.h"

/* --read entries: LAYER:EXPERT (the model's layer number) */
#define MAX_READ 256

struct opts {
	struct cli_volume_opts vol;
	const char *uri, *path;
	bool json;
	uint32_t n_read;
	uint32_t rl[MAX_READ], re[MAX_READ];
	uint32_t slots;
};

static void help(void)
{
	printf("usage: gpunvme experts URI PATH [options]\n"
	       "\n"
	       "The experts of a mixture-of-experts model in an ext4/XFS file system (no mount):\n"
	       "layout (one tensor per expert, or stacked), the MoE layers, experts per layer,\n"
	       "projections and bytes per expert. PATH: a safetensors or GGUF file, a Hugging\n"
	       "Face directory or index, a split GGUF shard.\n"
	       "\n"
	       "options:\n" CLI_VOLUME_HELP
	       "  -r, --read L:E[,L:E...]  read these experts (L: the model's layer number) through\n"
	       "                       the expert cache (CPU tier) and print the SHA-256 of each\n"
	       "                       one's bytes: its projections in the order listed, back to back\n"
	       "  -s, --slots N        cache slots for --read (default: as many as experts asked)\n"
	       "  -j, --json           JSON output\n"
	       "  -h, --help           this text\n");
}

static int parse_read(const char *s, struct opts *o)
{
	const char *p = s;
	while (*p) {
		char *end;
		errno = 0;
		unsigned long l = strtoul(p, &end, 10);
		if (end == p || *end != ':' || errno || l > UINT32_MAX)
			return cli_usage_err("--read '%s': expected LAYER:EXPERT[,LAYER:EXPERT...], e.g. 0:3,1:7", s);
		p = end + 1;
		unsigned long e = strtoul(p, &end, 10);
		if (end == p || (*end && *end != ',') || errno || e > UINT32_MAX)
			return cli_usage_err("--read '%s': expected LAYER:EXPERT[,LAYER:EXPERT...], e.g. 0:3,1:7", s);
		if (o->n_read == MAX_READ)
			return cli_usage_err("--read: at most %u experts", MAX_READ);
		o->rl[o->n_read] = (uint32_t)l;
		o->re[o->n_read++] = (uint32_t)e;
		p = *end ? end + 1 : end;
		if (*end && !*p)
			return cli_usage_err("--read '%s': a ',' with nothing after it", s);
	}
	return 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		CLI_VOLUME_LONGOPTS,
		{"read", required_argument, NULL, 'r'},
		{"slots", required_argument, NULL, 's'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	int c, rc;
	while ((c = cli_getopt(argc, argv, "n:r:s:jh", lo)) != -1) {
		if (cli_volume_opt(c, optarg, &o->vol, &rc)) {
			if (rc)
				return rc;
			continue;
		}
		switch (c) {
		case 'r':
			if ((rc = parse_read(optarg, o)))
				return rc;
			break;
		case 's':
			if ((rc = cli_opt_u32("--slots", optarg, false, 1, 65536, &o->slots)))
				return rc;
			break;
		case 'j': o->json = true; break;
		case 'h': help(); return -1;
		default: return EXIT_USAGE;
		}
	}
	return cli_uri_model_path(argc, argv, &o->vol, &o->uri, &o->path);
}

/* The experts --read names, through the CPU cache; their hashes. */
static int read_experts(struct cli_fs *f, struct gpunvme_model_set *set, const struct gpunvme_moe_index *x,
			const struct opts *o, char (*hex)[65])
{
	int idx[MAX_READ];
	for (uint32_t r = 0; r < o->n_read; r++) {
		idx[r] = gpunvme_moe_layer_find(x, o->rl[r]);
		if (idx[r] < 0)
			return cli_err(EXIT_RUNTIME, "--read %u:%u: layer %u has no experts (MoE layers: %u of them, from %u)",
				       o->rl[r], o->re[r], o->rl[r], x->n_layers, x->layer[0]);
		if (o->re[r] >= x->n_experts)
			return cli_err(EXIT_RUNTIME, "--read %u:%u: the layer has %u experts (0..%u)", o->rl[r], o->re[r],
				       x->n_experts, x->n_experts - 1);
	}
	struct gpunvme_loader_opts lo;
	gpunvme_loader_opts_init(&lo);
	lo.tier = GPUNVME_TIER_CPU;
	struct gpunvme_layer_loader *l = NULL;
	int rc = gpunvme_layer_loader_init_volume(f->vol, set->ext, set->n_ext, set->size, &lo, &l);
	if (rc)
		return cli_err(EXIT_RUNTIME, "%s: %s", o->uri, gpunvme_last_error());
	struct gpunvme_expert_cache *c = NULL;
	uint32_t slots = o->slots ? o->slots : o->n_read;
	if ((rc = gpunvme_expert_cache_open(x, l, slots, &c))) {
		gpunvme_layer_loader_destroy(l);
		return cli_err(EXIT_RUNTIME, "%s", gpunvme_last_error());
	}
	/* one at a time: a cache of fewer slots than experts asked still works */
	for (uint32_t r = 0; r < o->n_read && !rc; r++) {
		uint32_t slot;
		if ((rc = gpunvme_expert_cache_get(c, (uint32_t)idx[r], &o->re[r], 1, &slot))) {
			rc = cli_err(EXIT_RUNTIME, "%s %s: %s", o->uri, o->path, gpunvme_last_error());
			break;
		}
		struct gpunvme_sha256 h;
		gpunvme_sha256_init(&h);
		const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(x, (uint32_t)idx[r], o->re[r]);
		for (uint32_t p = 0; p < x->n_proj; p++)
			gpunvme_sha256_update(&h, gpunvme_expert_cache_piece(c, slot, p), pc[p].bytes);
		uint8_t d[32];
		gpunvme_sha256_final(&h, d);
		gpunvme_sha256_hex(d, hex[r]);
	}
	gpunvme_expert_cache_close(c);
	gpunvme_layer_loader_destroy(l);
	return rc;
}

int cmd_experts(int argc, char **argv)
{
	struct opts o;
	memset(&o, 0, sizeof(o));
	cli_volume_opts_init(&o.vol);
	int rc = parse(argc, argv, &o);
	if (rc)
		return rc < 0 ? 0 : rc;
	struct cli_fs f;
	if ((rc = cli_fs_open(&f, o.uri, NULL, NULL, &o.vol)))
		return rc;
	struct gpunvme_model_set *set = NULL;
	struct gpunvme_moe_index *x = NULL;
	char(*hex)[65] = calloc(MAX_READ, 65);
	if (!hex) {
		rc = cli_err(EXIT_RUNTIME, "out of memory");
	} else if ((rc = gpunvme_model_set_open(f.fs, o.path, &set))) {
		rc = rc == -ENOENT || rc == -ENOTDIR ? cli_err(EXIT_RUNTIME, "%s: %s in the %s file system of %s (%s)", o.path,
							       strerror(-rc), gpunvme_fs_type(f.fs), o.uri, gpunvme_last_error())
						     : cli_err(EXIT_RUNTIME, "%s", gpunvme_last_error());
	} else if ((rc = gpunvme_moe_index_build(set->model, &x))) {
		rc = cli_err(EXIT_RUNTIME, "%s: %s", o.path, gpunvme_last_error());
	} else if (o.n_read) {
		rc = read_experts(&f, set, x, &o, hex);
	}
	if (!rc) {
		uint64_t all = 0;
		const struct gpunvme_moe_piece *p0 = gpunvme_moe_expert(x, 0, 0);
		for (uint32_t i = 0; i < x->n_layers; i++)
			for (uint32_t e = 0; e < x->n_experts; e++)
				for (uint32_t p = 0; p < x->n_proj; p++)
					all += gpunvme_moe_expert(x, i, e)[p].bytes;
		if (o.json) {
			struct cli_json j;
			cj_init(&j, stdout);
			cj_obj_begin(&j, NULL);
			cj_str(&j, "path", o.path);
			cj_str(&j, "layout", gpunvme_moe_layout_str(x->layout));
			cj_u64(&j, "experts_per_layer", x->n_experts);
			cj_arr_begin(&j, "layers");
			for (uint32_t i = 0; i < x->n_layers; i++)
				cj_u64(&j, NULL, x->layer[i]);
			cj_arr_end(&j);
			cj_arr_begin(&j, "projections");
			for (uint32_t p = 0; p < x->n_proj; p++) {
				cj_obj_begin(&j, NULL);
				cj_str(&j, "name", x->proj[p]);
				cj_u64(&j, "bytes", p0[p].bytes);
				cj_obj_end(&j);
			}
			cj_arr_end(&j);
			cj_u64(&j, "max_expert_bytes", x->max_expert_bytes);
			cj_u64(&j, "all_expert_bytes", all);
			cj_u64(&j, "model_bytes", set->size);
			if (o.n_read) {
				cj_arr_begin(&j, "read");
				for (uint32_t r = 0; r < o.n_read; r++) {
					cj_obj_begin(&j, NULL);
					cj_u64(&j, "layer", o.rl[r]);
					cj_u64(&j, "expert", o.re[r]);
					cj_str(&j, "sha256", hex[r]);
					cj_obj_end(&j);
				}
				cj_arr_end(&j);
			}
			cj_obj_end(&j);
			cj_finish(&j);
		} else {
			char b1[32], b2[32], b3[32];
			cli_put_name(stdout, o.path, strlen(o.path));
			printf(": %s experts, %u MoE layers (%u..%u), %u experts each, up to %s per expert, %s of experts "
			       "in %s\n",
			       gpunvme_moe_layout_str(x->layout), x->n_layers, x->layer[0], x->layer[x->n_layers - 1], x->n_experts,
			       cli_human_bytes(x->max_expert_bytes, b1, sizeof(b1)), cli_human_bytes(all, b2, sizeof(b2)),
			       cli_human_bytes(set->size, b3, sizeof(b3)));
			for (uint32_t p = 0; p < x->n_proj; p++) {
				printf("  ");
				cli_put_name(stdout, x->proj[p], strlen(x->proj[p]));
				printf("  %llu bytes (layer %u expert 0)\n", (unsigned long long)p0[p].bytes, x->layer[0]);
			}
			for (uint32_t r = 0; r < o.n_read; r++)
				printf("layer %u expert %u  sha256 %s\n", o.rl[r], o.re[r], hex[r]);
		}
	}
	free(hex);
	gpunvme_moe_index_free(x);
	gpunvme_model_set_free(set);
	cli_fs_close(&f);
	return rc;
}
