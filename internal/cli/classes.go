package cli

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"crucible.dev/crucible/internal/api/apiv1"
)

func newClassesCmd() *cobra.Command {
	var server, output, cluster string
	cmd := &cobra.Command{
		Use:   "classes [--cluster C]",
		Short: "List the pod classes you may submit with, per cluster, with their bounds",
		Long: `classes lists, for every cluster you may create work pods on, the pod classes
it offers you (GET /api/classes): what a pod of each gets (requests, GPUs,
deadline, /dev/shm) and what "crucible submit" may change within which bounds
(--gpus, --cpu, --memory, --resource, --deadline).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var out []apiv1.ClusterClasses
			if err := newAPIClient(server).do(cmd.Context(), http.MethodGet, "/api/classes", nil, &out); err != nil {
				return err
			}
			if cluster != "" {
				out = slices.DeleteFunc(out, func(c apiv1.ClusterClasses) bool { return c.Cluster != cluster })
			}
			if output == "json" {
				return printPods(cmd.OutOrStdout(), output, out)
			}
			return printClasses(cmd.OutOrStdout(), out)
		},
	}
	addServerFlag(cmd, &server)
	cmd.Flags().StringVar(&cluster, "cluster", "", "only this cluster")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

func printClasses(w io.Writer, clusters []apiv1.ClusterClasses) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tCLASS\tDEFAULT FOR\tGPUS\tREQUESTS\tDEADLINE\tSHM\tYOU MAY CHANGE")
	for _, c := range clusters {
		for _, cl := range c.Classes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", c.Cluster, cl.Name, dash(strings.Join(cl.DefaultFor, ",")), cl.GPUs,
				keyValues(cl.Requests), cl.Deadline, dash(cl.Shm), allowText(cl))
		}
	}
	return tw.Flush()
}

// allowText is a class's bounds as the flags that use them.
func allowText(c apiv1.Class) string {
	var parts []string
	if g := c.Allow.GPUs; g != nil {
		parts = append(parts, fmt.Sprintf("--gpus %s-%s", g.Min, g.Max))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Allow.Resources)) {
		r := c.Allow.Resources[name]
		flag := "--resource " + name + "="
		if name == "cpu" || name == "memory" {
			flag = "--" + name + " "
		}
		bound := "≤" + r.Max
		if r.Min != "" {
			bound = r.Min + "-" + r.Max
		}
		parts = append(parts, flag+bound)
	}
	return strings.Join(append(parts, "--deadline ≤"+c.MaxDeadline), ", ")
}

func keyValues(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return dash(strings.Join(parts, ","))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
