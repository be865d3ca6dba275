"""The matcher: hard constraints, ranking by cost per useful work, gangs, replicas, priority, explanations."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import given, settings, target
from hypothesis import strategies as st

from market.matcher import CONSTRAINTS, JobRequest, Machine, ProviderOffer, match

WEI = 10**12


def offer(address: str = "0xa", **changes) -> ProviderOffer:
    base = ProviderOffer(
        address=address, gpu_model="A100", gpus=8, vram_gb=80, cpus=64, memory_gb=512,
        price_per_unit=10 * WEI, stake_ok=True, jailed=False, score=0.9, measured_perf=1.0, reliability=0.95,
    )
    return dataclasses.replace(base, **changes)


def job(job_id: int = 1, **changes) -> JobRequest:
    base = JobRequest(
        job_id=job_id, workers=1, gpus_per_worker=1, gpu_model="A100", vram_gb_per_worker=40,
        cpus_per_worker=4, memory_gb=32, max_price_per_unit=20 * WEI, min_score=0.5, priority=0, replicas=1,
    )
    return dataclasses.replace(base, **changes)


def providers_of(result, job_id: int) -> list[str]:
    return [a.provider for a in result.assignments if a.job_id == job_id]


# Each case: a change to the best-ranked provider that breaks exactly one hard constraint.
BROKEN: dict[str, dict[str, Any]] = {
    "stake": {"stake_ok": False},
    "jailed": {"jailed": True},
    "gpu_model": {"gpu_model": "T4"},
    "vram": {"vram_gb": 24},
    "score": {"score": 0.2},
    "price": {"price_per_unit": 30 * WEI, "measured_perf": 10.0},  # cheapest per useful unit, over the cap
    "capacity": {"gpus": 0},
}


@pytest.mark.parametrize("constraint", sorted(BROKEN))
def test_each_hard_constraint_excludes_the_provider_that_breaks_it(constraint):
    best = dataclasses.replace(offer("0xbest", price_per_unit=1 * WEI), **BROKEN[constraint])
    fallback = offer("0xfallback", price_per_unit=15 * WEI)
    assert providers_of(match([job()], [best, fallback]), 1) == ["0xfallback"]


@pytest.mark.parametrize("constraint", sorted(BROKEN))
def test_a_job_that_matches_nothing_is_told_which_constraint_ruled_providers_out(constraint):
    broken = [dataclasses.replace(offer(f"0x{i}"), **BROKEN[constraint]) for i in range(3)]
    result = match([job()], broken)
    assert result.assignments == []
    explanation = result.unmatched[1]
    assert explanation.constraint == constraint
    assert explanation.ruled_out[constraint] == 3
    assert explanation.providers == 3
    assert constraint in explanation.text


def test_all_providers_too_expensive_is_explained_as_price_with_counts_per_constraint():
    providers = [offer(f"0x{i}", price_per_unit=(25 + i) * WEI) for i in range(5)]
    providers.append(offer("0xt4", gpu_model="T4", vram_gb=16, price_per_unit=30 * WEI))
    explanation = match([job()], providers).unmatched[1]
    assert explanation.constraint == "price"
    assert explanation.ruled_out == {
        "stake": 0, "jailed": 0, "gpu_model": 1, "vram": 1, "score": 0, "price": 6, "nodes": 0, "capacity": 0,
    }
    assert explanation.text.startswith("Job 1 matched no provider: price ruled out the most, 6 of 6 ")


def test_a_pricier_but_much_faster_gpu_beats_a_cheap_slow_one():
    cheap_slow = offer("0xslow", price_per_unit=4 * WEI, measured_perf=0.25)  # 16 per useful unit
    fast = offer("0xfast", price_per_unit=12 * WEI, measured_perf=1.0)  # 12 per useful unit
    result = match([job(gpu_model=None)], [cheap_slow, fast])
    assert result.assignments[0].provider == "0xfast"
    assert result.assignments[0].price_per_unit == 12 * WEI


def test_equal_cost_goes_to_the_more_reliable_then_to_the_lower_address():
    shaky = offer("0x1", reliability=0.80)
    steady_b = offer("0x3", reliability=0.99)
    steady_a = offer("0x2", reliability=0.99)
    assert providers_of(match([job()], [shaky, steady_b, steady_a]), 1) == ["0x2"]


def test_a_gang_is_placed_on_one_provider_never_split_across_two():
    halves = [offer("0xh1", gpus=4), offer("0xh2", gpus=4)]
    gang = job(workers=2, gpus_per_worker=4)
    split = match([gang], halves)
    assert split.assignments == [] and split.unmatched[1].constraint == "capacity"
    whole = match([gang], [*halves, offer("0xwhole", gpus=8, price_per_unit=19 * WEI)])
    assert whole.assignments == [dataclasses.replace(whole.assignments[0], provider="0xwhole")]


def test_a_run_goes_only_to_a_provider_with_one_machine_that_holds_it():
    """A site of four 2-GPU machines has 8 GPUs, but a lease runs on one machine."""
    many_small = offer("0xsmall", gpus=8, node_gpus=2, price_per_unit=5 * WEI)
    four = job(1, workers=2, gpus_per_worker=2)
    refused = match([four], [many_small])
    assert refused.assignments == [] and refused.unmatched[1].constraint == "capacity"
    assert "a machine that holds it" in refused.unmatched[1].text
    placed = match([four, job(2, gpus_per_worker=2)], [many_small, offer("0xbig", gpus=4, node_gpus=4)])
    assert {(a.job_id, a.provider) for a in placed.assignments} == {(1, "0xbig"), (2, "0xsmall")}


# ---- jobs of several nodes ---------------------------------------------------------------

GPU_BOX = Machine(cpus=16, gpus=2, memory_gb=128)  # holds one node of two 1-GPU, 4-CPU, 32 GB workers


def site(address: str, machines: int, across_nodes: bool = True, **changes) -> ProviderOffer:
    """A site of `machines` GPU boxes, its free totals theirs."""
    return offer(address, gpus=2 * machines, cpus=16 * machines, memory_gb=128 * machines,
                 node_gpus=2, node_cpus=16, machines=(GPU_BOX,) * machines, across_nodes=across_nodes,
                 **changes)


def test_a_job_of_several_nodes_goes_only_to_a_site_across_machines_with_one_for_each_node():
    three = job(workers=2, nodes=3)  # each node: 2 GPUs, 8 CPUs, 64 GB
    old = offer("0xold", price_per_unit=1 * WEI)  # says nothing of its machines: unknown
    single = site("0xsingle", 4, across_nodes=False, price_per_unit=2 * WEI)
    short = site("0xshort", 2, price_per_unit=3 * WEI)
    small = dataclasses.replace(site("0xsmall", 4, price_per_unit=4 * WEI),
                                machines=(GPU_BOX, *(Machine(16, 1, 128),) * 3))  # one GPU each
    refused = match([three], [old, single, short, small])
    assert refused.assignments == []
    explanation = refused.unmatched[1]
    assert explanation.constraint == "nodes" and explanation.ruled_out["nodes"] == 4
    assert ("nodes ruled out the most, 4 of 4 providers (their sites cannot place all 3 of the job's nodes "
            "on separate machines, each holding one node's workers, or do not run jobs across machines)") \
        in explanation.text
    placed = match([three], [old, single, short, small, site("0xwide", 3, price_per_unit=15 * WEI)])
    assert providers_of(placed, 1) == ["0xwide"]


def test_a_job_of_several_nodes_holds_each_nodes_share_of_the_sites_free_totals():
    two = [job(i, workers=2, nodes=2) for i in (1, 2, 3)]  # each job: 4 GPUs on two machines
    result = match(two, [site("0xwide", 5)])  # 10 GPUs on five machines: room for two such jobs
    assert [a.job_id for a in result.assignments] == [1, 2]
    assert result.unmatched[3].constraint == "capacity"
    assert "lack free capacity for all 2 nodes' workers together" in result.unmatched[3].text


def test_a_job_of_one_node_still_needs_one_machine_that_holds_it_not_several():
    whole = job(workers=4)  # 4 GPUs on one machine
    result = match([whole], [site("0xwide", 4)])  # 8 GPUs, 2 a machine
    assert result.assignments == [] and result.unmatched[1].constraint == "capacity"


def test_capacity_is_consumed_so_the_next_job_goes_to_the_next_provider():
    providers = [offer("0xcheap", gpus=2, price_per_unit=5 * WEI), offer("0xdear", gpus=2)]
    result = match([job(i, gpus_per_worker=2) for i in (1, 2, 3)], providers)
    assert [(a.job_id, a.provider) for a in result.assignments] == [(1, "0xcheap"), (2, "0xdear")]
    assert result.unmatched[3].constraint == "capacity"


def test_replicas_go_to_distinct_providers_or_not_at_all():
    providers = [offer("0x1", gpus=8), offer("0x2", gpus=8, price_per_unit=12 * WEI)]
    assert sorted(providers_of(match([job(replicas=2)], providers), 1)) == ["0x1", "0x2"]
    short = match([job(replicas=3)], providers)
    assert short.assignments == []
    assert "only 2 of 2 providers qualify" in short.unmatched[1].text


def test_a_job_that_needs_no_cpu_is_refused():
    with pytest.raises(ValueError, match="cpus_per_worker"):
        job(cpus_per_worker=0)


def test_higher_priority_is_matched_first_then_input_order():
    one_slot = [offer("0x1", gpus=1)]
    jobs = [job(1, priority=0), job(2, priority=5), job(3, priority=5)]
    result = match(jobs, one_slot)
    assert [a.job_id for a in result.assignments] == [2]
    assert set(result.unmatched) == {1, 3}


# ---- random markets against the definition ---------------------------------------------

MODELS = ("A100", "H100", "T4")


def holds_a_node(m: Machine, j: JobRequest) -> bool:
    return (m.cpus >= j.workers * j.cpus_per_worker and m.gpus >= j.workers * j.gpus_per_worker
            and m.memory_gb >= j.workers * j.memory_gb)


def places_nodes(j: JobRequest, p: ProviderOffer) -> bool:
    """One node on its largest machine; several on as many machines of a site that runs across them."""
    if j.nodes == 1:
        return p.node_gpus >= j.workers * j.gpus_per_worker and p.node_cpus >= j.workers * j.cpus_per_worker
    return (p.across_nodes and p.machines is not None
            and sum(holds_a_node(m, j) for m in p.machines) >= j.nodes)


def fits(j: JobRequest, p: ProviderOffer, free: tuple[int, int, float]) -> bool:
    """Every hard constraint, written out from the definition."""
    n = j.nodes
    return (
        p.stake_ok
        and not p.jailed
        and (j.gpu_model is None or p.gpu_model == j.gpu_model)
        and p.vram_gb * j.gpus_per_worker >= j.vram_gb_per_worker
        and p.score >= j.min_score
        and p.price_per_unit <= j.max_price_per_unit
        and free[0] >= n * j.workers * j.gpus_per_worker
        and free[1] >= n * j.workers * j.cpus_per_worker
        and free[2] >= n * (j.workers * j.memory_gb)
        and places_nodes(j, p)
    )


providers_st = st.lists(
    st.builds(
        ProviderOffer,
        address=st.just(""),
        gpu_model=st.sampled_from(MODELS),
        gpus=st.integers(0, 8),
        vram_gb=st.sampled_from((16, 40, 80)),
        cpus=st.integers(0, 32),
        memory_gb=st.integers(0, 256),
        price_per_unit=st.integers(1, 10),
        stake_ok=st.booleans(),
        jailed=st.booleans(),
        score=st.sampled_from((0.1, 0.5, 0.9)),
        measured_perf=st.sampled_from((0.5, 1.0, 2.0)),
        reliability=st.sampled_from((0.5, 0.9)),
        node_cpus=st.sampled_from((4, 16, math.inf)),  # its largest machine's
        node_gpus=st.sampled_from((1, 4, math.inf)),
        machines=st.none() | st.lists(st.builds(Machine, cpus=st.sampled_from((2, 8, 16)),
                                                gpus=st.sampled_from((0, 1, 4)),
                                                memory_gb=st.sampled_from((16, 64, 256))),
                                      max_size=4).map(tuple),
        across_nodes=st.booleans(),
    ),
    max_size=12,
).map(lambda ps: [dataclasses.replace(p, address=f"0x{i:02x}") for i, p in enumerate(ps)])

jobs_st = st.lists(
    st.builds(
        JobRequest,
        job_id=st.just(0),
        workers=st.integers(1, 3),
        gpus_per_worker=st.integers(0, 4),
        gpu_model=st.sampled_from((None, *MODELS)),
        vram_gb_per_worker=st.sampled_from((0, 16, 60, 160)),
        cpus_per_worker=st.integers(1, 8),
        memory_gb=st.integers(0, 64),
        max_price_per_unit=st.integers(1, 10),
        min_score=st.sampled_from((0.0, 0.5, 0.9)),
        priority=st.integers(0, 2),
        replicas=st.integers(1, 2),
        nodes=st.sampled_from((1, 1, 2, 3)),
    ),
    max_size=25,
).map(lambda js: [dataclasses.replace(j, job_id=i) for i, j in enumerate(js)])


# Markets where jobs of several nodes do get placed: every provider eligible, and small jobs
# indifferent to model, score and price, so that machines and free totals decide.
spread_providers_st = providers_st.map(
    lambda ps: [dataclasses.replace(p, stake_ok=True, jailed=False) for p in ps]
)
spread_jobs_st = jobs_st.map(lambda js: [
    dataclasses.replace(j, gpu_model=None, vram_gb_per_worker=0, min_score=0.0, max_price_per_unit=10,
                        gpus_per_worker=min(j.gpus_per_worker, 1), cpus_per_worker=min(j.cpus_per_worker, 2),
                        memory_gb=min(j.memory_gb, 16))
    for j in js
])


@settings(max_examples=300, deadline=None)
@given(providers_st, jobs_st)
def test_random_markets_respect_capacity_constraints_replicas_and_priority(providers, jobs):
    replays_by_the_definition(providers, jobs)


def replays_by_the_definition(providers: list[ProviderOffer], jobs: list[JobRequest]) -> None:
    result = match(jobs, providers)
    by_address = {p.address: p for p in providers}
    by_id = {j.job_id: j for j in jobs}
    assigned: dict[int, list[str]] = {}
    for a in result.assignments:
        assigned.setdefault(a.job_id, []).append(a.provider)
        assert a.price_per_unit == by_address[a.provider].price_per_unit
    assert set(assigned) | set(result.unmatched) == set(by_id) and not set(assigned) & set(result.unmatched)

    # Replay in the order the matcher promises (priority, then input order): each matched job
    # got `replicas` distinct providers that fit it given what the jobs before it had taken,
    # and they are the best-ranked such providers; each unmatched job had too few that fit.
    free = {p.address: (p.gpus, p.cpus, p.memory_gb) for p in providers}
    for j in sorted(jobs, key=lambda j: -j.priority):
        fitting = sorted(
            (p for p in providers if fits(j, p, free[p.address])),
            key=lambda p: (p.price_per_unit / p.measured_perf, -p.reliability, p.address),
        )
        if j.job_id in result.unmatched:
            assert len(fitting) < j.replicas
            explanation = result.unmatched[j.job_id]
            assert set(explanation.ruled_out) == set(CONSTRAINTS)
            continue
        got = assigned[j.job_id]
        assert len(got) == len(set(got)) == j.replicas
        assert got == [p.address for p in fitting[: j.replicas]]
        for address in got:
            g, c, m = free[address]
            free[address] = (g - j.nodes * j.workers * j.gpus_per_worker,
                             c - j.nodes * j.workers * j.cpus_per_worker,
                             m - j.nodes * (j.workers * j.memory_gb))
    assert all(min(left) >= 0 for left in free.values())  # never oversubscribed


@settings(max_examples=300, deadline=None)
@given(spread_providers_st, spread_jobs_st)
def test_a_job_of_several_nodes_never_goes_to_a_site_without_a_machine_for_each_node(providers, jobs):
    replays_by_the_definition(providers, jobs)
    result = match(jobs, providers)
    by_address = {p.address: p for p in providers}
    by_id = {j.job_id: j for j in jobs}
    target(sum(by_id[a.job_id].nodes > 1 for a in result.assignments), label="jobs of several nodes placed")
    for a in result.assignments:
        j, p = by_id[a.job_id], by_address[a.provider]
        if j.nodes > 1:
            assert p.across_nodes, "only a site that runs jobs across machines"
            assert p.machines is not None, "a site that did not say what its machines are takes none"
            assert sum(holds_a_node(m, j) for m in p.machines) >= j.nodes


@settings(max_examples=300, deadline=None)
@given(providers_st, jobs_st)
def test_what_sites_say_of_their_machines_changes_nothing_for_jobs_of_one_node(providers, jobs):
    """Assignments and explanations alike: a job of one node is matched as before sites said."""
    single = [dataclasses.replace(j, nodes=1) for j in jobs]
    unsaid = [dataclasses.replace(p, machines=None, across_nodes=False) for p in providers]
    assert match(single, providers) == match(single, unsaid)


def test_an_explanation_for_a_full_gpu_model_names_capacity_among_that_models_providers() -> None:
    from market.matcher import JobRequest, ProviderOffer, match

    def offer(i: int, model: str, gpus: int) -> ProviderOffer:
        return ProviderOffer(
            address=f"0x{i:040x}",
            gpu_model=model,
            gpus=gpus,
            vram_gb=80,
            cpus=8,
            memory_gb=64,
            price_per_unit=10,
            stake_ok=True,
            jailed=False,
            score=0.9,
            measured_perf=1.0,
            reliability=0.9,
        )

    providers = [offer(1, "H100", 1)] + [offer(i, "A100", 8) for i in range(2, 12)]
    jobs = [
        JobRequest(
            job_id=1,
            workers=1,
            gpus_per_worker=8,
            gpu_model="H100",
            vram_gb_per_worker=80,
            cpus_per_worker=1,
            memory_gb=1,
            max_price_per_unit=100,
            min_score=0,
            priority=5,
            replicas=1,
        )
    ]
    result = match(jobs, providers)
    assert result.assignments == []
    explanation = result.unmatched[1]
    assert explanation.ruled_out["gpu_model"] == 10
    assert "of the 1 H100 providers, capacity ruled out the most, 1" in explanation.text
