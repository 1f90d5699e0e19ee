/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The expert cache (include/gpunvme/moe.h), host side: K slots of loader
 * memory, the replacement rule of policy.h (fewest requests, then least
 * recently used, among the slots a request does not need), misses read
 * through the layer loader.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gpunvme/moe.h"
#include "moe/policy.h"

struct slot {
	int64_t key;               /* layer * n_experts + expert; -1 empty */
	uint64_t used;             /* clock of the last request that used it */
	uint64_t mark;             /* the request that needs it now */
	uint64_t pos[GPUNVME_MOE_MAX_PROJ];
};

struct gpunvme_expert_cache {
	const struct gpunvme_moe_index *x;
	struct gpunvme_layer_loader *l;
	uint32_t nslots;
	uint64_t slot_bytes;
	uint8_t *mem;
	struct slot *s;
	int32_t *where;            /* per key: its slot, -1 when not resident */
	uint32_t *freq;            /* per key: requests (policy.h) */
	uint32_t keys;
	uint64_t since_age;        /* requests since the counts were last halved */
	uint64_t clock;
	struct gpunvme_expert_cache_stats st;
};

void gpunvme_expert_cache_close(struct gpunvme_expert_cache *c)
{
	if (!c)
		return;
	if (c->mem)
		gpunvme_layer_loader_free(c->l, c->mem);
	free(c->s);
	free(c->where);
	free(c->freq);
	free(c);
}

int gpunvme_expert_cache_open(const struct gpunvme_moe_index *x, struct gpunvme_layer_loader *l, uint32_t slots,
			      struct gpunvme_expert_cache **out)
{
	if (!out)
		return gpunvme_set_error(-EINVAL, "expert cache: bad arguments");
	*out = NULL;
	if (!x || !l || !slots)
		return gpunvme_set_error(-EINVAL, "expert cache: %s", !x ? "no expert index" : !l ? "no loader" :
							      "0 slots: give room for at least the experts one token uses");
	struct gpunvme_expert_cache *c = calloc(1, sizeof(*c));
	size_t keys = (size_t)x->n_layers * x->n_experts;
	if (!c || !(c->s = calloc(slots, sizeof(*c->s))) || !(c->where = malloc((keys ? keys : 1) * sizeof(*c->where))) ||
	    !(c->freq = calloc(keys ? keys : 1, sizeof(*c->freq)))) {
		gpunvme_expert_cache_close(c);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	c->x = x;
	c->l = l;
	c->nslots = slots;
	c->keys = (uint32_t)keys;
	for (size_t k = 0; k < keys; k++)
		c->where[k] = -1;
	uint64_t pos[GPUNVME_MOE_MAX_PROJ], most = 0;
	for (uint32_t li = 0; li < x->n_layers; li++)
		for (uint32_t e = 0; e < x->n_experts; e++) {
			uint64_t end = gpunvme_moe_place(x, li, e, pos);
			most = end > most ? end : most;
		}
	const uint64_t sb = (most + GPUNVME_MOE_PLACE - 1) / GPUNVME_MOE_PLACE * GPUNVME_MOE_PLACE;
	c->slot_bytes = sb;
	if (sb && (slots > UINT64_MAX / sb || sb * slots > SIZE_MAX)) {
		gpunvme_expert_cache_close(c);
		return gpunvme_set_error(-ENOMEM, "expert cache: %u slots of %llu bytes overflow", slots,
					 (unsigned long long)sb);
	}
	if (sb && !(c->mem = gpunvme_layer_loader_alloc(l, 0, (size_t)(sb * slots)))) {
		char why[256];
		snprintf(why, sizeof(why), "%s", gpunvme_last_error());
		gpunvme_expert_cache_close(c);
		return gpunvme_set_error(-ENOMEM, "expert cache: %u slots of %llu bytes: %s", slots,
					 (unsigned long long)sb, why);
	}
	for (uint32_t i = 0; i < slots; i++)
		c->s[i].key = -1;
	*out = c;
	return 0;
}

/* The slot to read a missing expert into: an empty one, else the policy's
 * victim (policy.h) among those the current request (mark) does not need. */
static uint32_t victim(struct gpunvme_expert_cache *c, uint64_t mark)
{
	uint32_t best = UINT32_MAX;
	for (uint32_t i = 0; i < c->nslots; i++) {
		if (c->s[i].mark == mark)
			continue;
		if (c->s[i].key < 0)
			return i;
		if (best == UINT32_MAX || moe_policy_before(c->freq[c->s[i].key], c->s[i].used,
							      c->freq[c->s[best].key], c->s[best].used))
			best = i;
	}
	return best; /* one exists: the request's distinct experts <= slots */
}

int gpunvme_expert_cache_get(struct gpunvme_expert_cache *c, uint32_t i, const uint32_t *ids, uint32_t k,
			     uint32_t *slots)
{
	if (!c || (k && (!ids || !slots)))
		return gpunvme_set_error(-EINVAL, "expert cache: bad arguments");
	const struct gpunvme_moe_index *x = c->x;
	if (i >= x->n_layers)
		return gpunvme_set_error(-EINVAL, "expert cache: MoE layer %u of %u", i, x->n_layers);
	for (uint32_t j = 0; j < k; j++)
		if (ids[j] >= x->n_experts)
			return gpunvme_set_error(-EINVAL, "expert cache: expert %u of layer %u: the layer has %u experts",
						 ids[j], x->layer[i], x->n_experts);
	/* a mark for this request: the slots it needs are not victims. Mark
	 * values only grow (0 is "never"), like the use clock. */
	const uint64_t mark = ++c->clock;
	moe_policy_age(c->freq, c->keys, &c->since_age);
	uint32_t distinct = 0;
	for (uint32_t j = 0; j < k; j++) {
		int64_t key = (int64_t)i * x->n_experts + ids[j];
		bool dup = false;
		for (uint32_t q = 0; q < j && !dup; q++)
			dup = ids[q] == ids[j];
		if (dup)
			continue;
		distinct++;
		int32_t s = c->where[key];
		if (s >= 0)
			c->s[s].mark = mark;
	}
	if (distinct > c->nslots)
		return gpunvme_set_error(-ENOSPC, "expert cache: %u distinct experts in one request, %u slots: they cannot "
						  "all be resident; open the cache with at least %u slots", distinct, c->nslots,
					 distinct);
	/* The misses of this request: each gets its victim slot now (empty
	 * while it fills: a failed read leaves no partial expert behind), and
	 * all their pieces are read in one call, so their reads go to the
	 * controller together (gpunvme_load_layers) rather than one piece
	 * after the other. */
	struct miss {
		uint32_t j, slot;
		int64_t key;
	} *miss = malloc((k ? k : 1) * sizeof(*miss));
	struct gpunvme_load_span *sp = malloc((k ? k : 1) * x->n_proj * sizeof(*sp));
	if (!miss || !sp) {
		free(miss);
		free(sp);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	uint32_t nmiss = 0;
	for (uint32_t j = 0; j < k; j++) {
		int64_t key = (int64_t)i * x->n_experts + ids[j];
		int32_t s = c->where[key];
		bool first = true;
		for (uint32_t q = 0; q < j && first; q++)
			first = ids[q] != ids[j];
		if (first) {
			c->st.requests++;
			moe_policy_count(c->freq, (uint32_t)key, &c->since_age);
		}
		if (s >= 0) {
			if (first)
				c->st.hits++;
			c->s[s].used = mark;
			slots[j] = (uint32_t)s;
			continue;
		}
		if (!first)
			continue; /* a repeat of a miss: its slot is set below */
		uint32_t v = victim(c, mark);
		struct slot *sl = &c->s[v];
		if (sl->key >= 0) {
			c->where[sl->key] = -1;
			c->st.evictions++;
		}
		sl->key = -1;
		sl->mark = mark;
		gpunvme_moe_place(x, i, ids[j], sl->pos);
		const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(x, i, ids[j]);
		uint8_t *base = c->mem + (size_t)v * c->slot_bytes;
		for (uint32_t p = 0; p < x->n_proj; p++)
			sp[nmiss * x->n_proj + p] = (struct gpunvme_load_span){ pc[p].offset, pc[p].bytes, base + sl->pos[p] };
		miss[nmiss++] = (struct miss){ j, v, key };
	}
	uint16_t status = 0;
	int rc = nmiss ? gpunvme_load_layers(c->l, sp, (size_t)nmiss * x->n_proj, &status) : 0;
	uint32_t good = nmiss;
	if (rc) {
		/* which expert? (the loader has retried the whole set) Each is
		 * read again alone, piece by piece, in order: those that read are
		 * kept, the first that fails is named */
		rc = 0;
		for (good = 0; good < nmiss && !rc; good++) {
			for (uint32_t p = 0; p < x->n_proj && !rc; p++) {
				const struct gpunvme_load_span *q = &sp[good * x->n_proj + p];
				if ((rc = gpunvme_load_layer(c->l, q->off, q->len, q->dst, &status))) {
					char why[256];
					snprintf(why, sizeof(why), "%s", gpunvme_last_error());
					gpunvme_set_error(rc, "expert cache: layer %u expert %u, %s: %s", x->layer[i],
							  ids[miss[good].j], x->proj[p], why);
				}
			}
		}
		if (rc)
			good--; /* the one that failed stays empty, and those after it */
	}
	for (uint32_t m = 0; m < good; m++) {
		struct slot *sl = &c->s[miss[m].slot];
		sl->key = miss[m].key;
		sl->used = mark;
		c->where[miss[m].key] = (int32_t)miss[m].slot;
		c->st.misses++;
		for (uint32_t p = 0; p < x->n_proj; p++)
			c->st.bytes_read += sp[m * x->n_proj + p].len;
	}
	free(miss);
	free(sp);
	if (rc)
		return rc;
	/* repeats of a miss take its slot */
	for (uint32_t j = 0; j < k; j++)
		slots[j] = (uint32_t)c->where[(int64_t)i * x->n_experts + ids[j]];
	return 0;
}

void *gpunvme_expert_cache_piece(const struct gpunvme_expert_cache *c, uint32_t slot, uint32_t p)
{
	if (!c || slot >= c->nslots || p >= c->x->n_proj || c->s[slot].key < 0)
		return NULL;
	return c->mem + (size_t)slot * c->slot_bytes + c->s[slot].pos[p];
}

int gpunvme_expert_cache_slot(const struct gpunvme_expert_cache *c, uint32_t slot, uint32_t *layer, uint32_t *expert)
{
	if (!c || slot >= c->nslots)
		return gpunvme_set_error(-EINVAL, "expert cache: no slot %u", slot);
	if (c->s[slot].key < 0)
		return -ENOENT;
	if (layer)
		*layer = c->x->layer[c->s[slot].key / c->x->n_experts];
	if (expert)
		*expert = (uint32_t)(c->s[slot].key % c->x->n_experts);
	return 0;
}

void gpunvme_expert_cache_stats(const struct gpunvme_expert_cache *c, struct gpunvme_expert_cache_stats *st)
{
	if (c && st)
		*st = c->st;
}
