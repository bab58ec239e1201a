// Package placementtest is the placement benchmark's model of a GPU fleet
// under load (issue 39, make bench's placement-quality rows): a seeded
// stream of GPU pods, another tenant's load, the oracle that schedules the
// stream offline with perfect knowledge (greedy list scheduling), and the
// figures of a run (GPU occupancy, waits from submit to running) by which
// crucible's placement, round-robin submits and the oracle compare. It is
// pure: the benchmark runs the stream on a real stack and hands the
// outcome back here to be measured alike.
package placementtest
