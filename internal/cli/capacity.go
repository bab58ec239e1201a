package cli

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"crucible.dev/crucible/internal/api/apiv1"
)

func newCapacityCmd() *cobra.Command {
	var server, output, class string
	cmd := &cobra.Command{
		Use:   "capacity [--class C]",
		Short: "Show what is free on each spoke: GPUs per product, CPU and memory, and whether a class fits",
		Long: `capacity lists every spoke with what its nodes have free now (GET /api/capacity):
GPUs free of total per GPU product (the nodes' nvidia.com/gpu.product label), and
CPU and memory free of allocatable, counting the Ready, uncordoned nodes. Only
spokes with capacity = true in the controller's profile are watched; the others
show "no view". With --class it also says whether a pod of that class, with its
default asks, would fit on each spoke now, and why not — what placement
(--cluster auto) judges.`,
		Example: `  crucible capacity
  crucible capacity --class gpu
  crucible capacity -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := "/api/capacity"
			if class != "" {
				path += "?class=" + url.QueryEscape(class)
			}
			var out []apiv1.ClusterCapacity
			if err := newAPIClient(server).do(cmd.Context(), http.MethodGet, path, nil, &out); err != nil {
				return err
			}
			if output == "json" {
				return printPods(cmd.OutOrStdout(), output, out)
			}
			return printCapacity(cmd.OutOrStdout(), out, class != "")
		},
	}
	addServerFlag(cmd, &server)
	cmd.Flags().StringVar(&class, "class", "", "also say whether a pod of this class fits on each spoke now")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

func printCapacity(w io.Writer, clusters []apiv1.ClusterCapacity, withClass bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "CLUSTER\tGPUS FREE\tCPU FREE\tMEMORY FREE"
	if withClass {
		head += "\tFITS NOW"
	}
	fmt.Fprintln(tw, head)
	for _, c := range clusters {
		line := c.Cluster + "\t" + capacityText(c)
		if withClass {
			line += "\t" + fitsText(c)
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// capacityText is a spoke's figures, or why there are none.
func capacityText(c apiv1.ClusterCapacity) string {
	switch {
	case !c.View:
		return "no view\t-\t-"
	case !c.Synced:
		return "syncing\t-\t-"
	}
	gpus := "none"
	if len(c.GPUs) > 0 {
		parts := make([]string, 0, len(c.GPUs))
		for _, g := range c.GPUs {
			product := g.Product
			if product == "" {
				product = "gpu"
			}
			parts = append(parts, fmt.Sprintf("%d/%d %s", g.Free, g.Total, product))
		}
		gpus = strings.Join(parts, ", ")
	}
	return gpus + "\t" + amountText(c.CPU) + "\t" + amountText(c.Memory)
}

func amountText(a *apiv1.Amount) string {
	if a == nil {
		return "-"
	}
	return a.Free + "/" + a.Total
}

func fitsText(c apiv1.ClusterCapacity) string {
	switch {
	case c.Fits == nil && c.Reason != "":
		return c.Reason
	case c.Fits == nil && c.View:
		return "unknown (syncing)"
	case c.Fits == nil:
		return "unknown (no view)"
	case *c.Fits:
		return "yes"
	default:
		return "no: " + c.Reason
	}
}
