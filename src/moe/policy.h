/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The expert caches' replacement rule, shared by the host cache
 * (expert_cache.c) and the GPU cache's decide kernel (src/cuda/moe_gpu.cu),
 * so that the two cannot drift apart (test_moe_gpu_plan feeds both the same
 * requests and compares every slot).
 *
 * Why not plain LRU: a decode step asks every MoE layer for its top-k in
 * turn, so one token's requests form a cycle of layers x k experts. With
 * fewer slots than that (the point of a cache for a model bigger than the
 * GPU), LRU evicts each expert just before the next token asks for it again
 * and hits nothing, however popular the expert (measured: Mixtral-shaped,
 * 24 requests per token, 20 slots, skewed router: hit rate 0.00).
 *
 * The rule: every expert (resident or not) has a request count; the victim
 * is the slot, among those the current request does not need, whose expert
 * has the lowest count, the least recently used among equals. Counts are
 * halved every MOE_POLICY_AGE_PER_KEY x keys requests, so that a change of
 * popularity (a new prompt) wins within a few such periods. An evicted
 * expert keeps its count: a popular one pushed out by a burst comes back
 * ahead of the burst.
 */
#ifndef GPUNVME_MOE_POLICY_H
#define GPUNVME_MOE_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MOE_POLICY_FN static inline __host__ __device__
#else
#define MOE_POLICY_FN static inline
#endif

/* Requests per expert key between two halvings of every count: 8 per key
 * keeps about the last 8 x keys requests' popularity (for Mixtral 8x7B,
 * 32 x 8 keys: 2048 requests, 32 tokens of 32 layers x top-2). */
#define MOE_POLICY_AGE_PER_KEY 8u

/* A request for an expert: count it (saturating). */
MOE_POLICY_FN void moe_policy_count(uint32_t *freq, uint32_t key, uint64_t *since_age)
{
	if (freq[key] != UINT32_MAX)
		freq[key]++;
	(*since_age)++;
}

/* At the start of a request: age the counts when a period has passed. */
MOE_POLICY_FN void moe_policy_age(uint32_t *freq, uint32_t keys, uint64_t *since_age)
{
	if (*since_age < (uint64_t)MOE_POLICY_AGE_PER_KEY * keys)
		return;
	for (uint32_t k = 0; k < keys; k++)
		freq[k] >>= 1;
	*since_age = 0;
}

/* Is a resident expert with count fa, last used ua, a better victim than
 * one with fb, ub? Fewer requests first, then the older use. */
MOE_POLICY_FN bool moe_policy_before(uint32_t fa, uint64_t ua, uint32_t fb, uint64_t ub)
{
	return fa < fb || (fa == fb && ua < ub);
}

#endif
