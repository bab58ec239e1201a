package devstack

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// GPU nodes per spoke, as `crucible dev up --gpu-nodes` names them: a fleet
// whose spokes have GPUs of different counts and products, so that
// placement has something to choose between on one machine.

// DefaultGPUProduct is the nvidia.com/gpu.product of a GPU node whose
// product is not named, the A100 GPUNode always was.
const DefaultGPUProduct = "NVIDIA-A100-SXM4-80GB"

// MaxGPUNodes bounds one spoke's GPU nodes: kwok keeps each one's status
// (a heartbeat a few seconds apart), and a fleet of ten spokes of 64 is
// already more than a laptop's stack needs to show placement.
const MaxGPUNodes = 64

// MaxGPUsPerNode is the most GPUs one real node carries (NVIDIA's HGX
// boards of 16).
const MaxGPUsPerNode = 16

// GPUPool is one spoke's GPU nodes: Nodes alike, each with GPUs of Product.
type GPUPool struct {
	Spoke   string
	Nodes   int
	GPUs    int
	Product string
}

// String is the pool as --gpu-nodes writes it.
func (g GPUPool) String() string {
	s := fmt.Sprintf("%s=%dx%d", g.Spoke, g.Nodes, g.GPUs)
	if g.Product != DefaultGPUProduct {
		s += ":" + g.Product
	}
	return s
}

// ParseGPUNodes reads --gpu-nodes: comma-separated SPOKE=NODESxGPUS[:PRODUCT]
// entries (wharf=1x4,dock=2x8:NVIDIA-H100-80GB-HBM3), each naming one of
// spokes at most once. It reports every bad entry at once, each named.
func ParseGPUNodes(spec string, spokes []string) ([]GPUPool, error) {
	var pools []GPUPool
	var errs []error
	seen := map[string]bool{}
	for entry := range strings.SplitSeq(spec, ",") {
		entry = strings.TrimSpace(entry)
		pool, err := parseGPUPool(entry, spokes)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("--gpu-nodes entry %q: %w", entry, err))
		case seen[pool.Spoke]:
			errs = append(errs, fmt.Errorf("--gpu-nodes entry %q: spoke %s is named twice", entry, pool.Spoke))
		default:
			seen[pool.Spoke] = true
			pools = append(pools, pool)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return pools, nil
}

// parseGPUPool reads one SPOKE=NODESxGPUS[:PRODUCT].
func parseGPUPool(entry string, spokes []string) (GPUPool, error) {
	const want = "want SPOKE=NODESxGPUS[:PRODUCT], e.g. dock=2x8:NVIDIA-H100-80GB-HBM3"
	spoke, shape, ok := strings.Cut(entry, "=")
	if !ok || spoke == "" {
		return GPUPool{}, errors.New(want)
	}
	if !slices.Contains(spokes, spoke) {
		return GPUPool{}, fmt.Errorf("no spoke %q in this stack (it has %s)", spoke, strings.Join(spokes, ", "))
	}
	shape, product, hasProduct := strings.Cut(shape, ":")
	nodes, gpus, ok := strings.Cut(shape, "x")
	if !ok {
		return GPUPool{}, errors.New(want)
	}
	g := GPUPool{Spoke: spoke, Product: DefaultGPUProduct}
	var err error
	if g.Nodes, err = countIn(nodes, "nodes", MaxGPUNodes); err != nil {
		return GPUPool{}, err
	}
	if g.GPUs, err = countIn(gpus, "GPUs per node", MaxGPUsPerNode); err != nil {
		return GPUPool{}, err
	}
	if hasProduct {
		if msgs := validation.IsValidLabelValue(product); product == "" || len(msgs) > 0 {
			return GPUPool{}, fmt.Errorf("product %q is not a label value for nvidia.com/gpu.product (at most 63 of alphanumerics, '-', '_', '.', beginning and ending alphanumeric)", product)
		}
		g.Product = product
	}
	return g, nil
}

// countIn reads a count from 1 to most; what names it in the error.
func countIn(s, what string, most int) (int, error) {
	n, err := strconv.Atoi(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s %q is not a number", what, s)
	case n < 1 || n > most:
		return 0, fmt.Errorf("%d %s: want 1 to %d", n, what, most)
	}
	return n, nil
}

// NodeSpecs are the pool's nodes, GPUNode's shape each, named
// kwok-node-gpu-N with N zero-padded to the width of the largest, so that
// they sort by N (the first is GPUNodeName, the default spoke's GPU node).
func (g GPUPool) NodeSpecs() []NodeSpec {
	width := len(strconv.Itoa(g.Nodes - 1))
	nodes := make([]NodeSpec, g.Nodes)
	for i := range nodes {
		nodes[i] = ProductGPUNode(fmt.Sprintf("kwok-node-gpu-%0*d", width, i), g.GPUs, g.Product)
	}
	return nodes
}

// WithGPUNodes gives each spoke a CPU node and the GPU nodes its pool names,
// and a spoke no pool names the CPU node alone: --gpu-nodes replaces the
// default spoke's GPU node rather than adding to it.
func WithGPUNodes(spokes []SpokeOptions, pools []GPUPool) {
	for i := range spokes {
		spokes[i].Nodes = []NodeSpec{CPUNode(NodeName)}
		for _, g := range pools {
			if g.Spoke == spokes[i].Name {
				spokes[i].Nodes = append(spokes[i].Nodes, g.NodeSpecs()...)
			}
		}
	}
}
