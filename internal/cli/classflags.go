package cli

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"crucible.dev/crucible/internal/podclass"
)

// classFlags are a submission's pod class and what it asks of it, the same
// flags for `crucible submit` and `crucible render turn`.
type classFlags struct {
	class, cpu, memory, deadline string
	gpus                         int
	resources                    map[string]string
}

func (f *classFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.class, "class", "", "the pod class (default: the kind's default class); `crucible classes` lists them with their bounds")
	fs.IntVar(&f.gpus, "gpus", 0, "GPUs for the pod, within the class's bounds (default: the class's)")
	fs.StringVar(&f.cpu, "cpu", "", "the pod's cpu request, e.g. 4 or 500m, within the class's bounds")
	fs.StringVar(&f.memory, "memory", "", "the pod's memory request (and limit, where the class limits it), e.g. 32Gi, within the class's bounds")
	fs.StringToStringVar(&f.resources, "resource", nil, "NAME=QUANTITY: another resource's request, e.g. ephemeral-storage=50Gi (repeatable)")
	fs.StringVar(&f.deadline, "deadline", "", "the pod's deadline (activeDeadlineSeconds) as a duration, e.g. 6h, at most the class's max_deadline")
}

// ask is what the flags ask of the class; only flags given ask anything.
func (f *classFlags) ask(cmd *cobra.Command) podclass.Ask {
	a := podclass.Ask{Deadline: f.deadline}
	if cmd.Flags().Changed("gpus") {
		a.GPUs = new(f.gpus)
	}
	if len(f.resources) > 0 || f.cpu != "" || f.memory != "" {
		a.Resources = maps.Clone(f.resources)
		if a.Resources == nil {
			a.Resources = map[string]string{}
		}
		if f.cpu != "" {
			a.Resources["cpu"] = f.cpu
		}
		if f.memory != "" {
			a.Resources["memory"] = f.memory
		}
	}
	return a
}

// flagErrors names the flag behind each of the class's refusals (their
// paths are the API's: gpus, resources[memory], deadline).
func (f *classFlags) flagErrors(errs field.ErrorList) error {
	var out []error
	for _, e := range errs {
		out = append(out, fmt.Errorf("%s: %s", f.flagOf(e.Field), e.Detail))
	}
	return errors.Join(out...)
}

func (f *classFlags) flagOf(path string) string {
	name, ok := strings.CutPrefix(path, "resources[")
	if !ok {
		return "--" + path // class, gpus, deadline
	}
	name = strings.TrimSuffix(name, "]")
	if (name == "cpu" && f.cpu != "") || (name == "memory" && f.memory != "") {
		return "--" + name
	}
	return "--resource " + name
}
