package devstack

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Spokes are grouped in order: the first of every group of K runs the
// server, the rest are its guests; K ≤ 1 leaves every spoke a server.
func TestGroupSpokes(t *testing.T) {
	names := func(spokes []SpokeOptions) []string {
		var out []string
		for _, s := range spokes {
			out = append(out, s.Name)
		}
		return out
	}
	all := NamedSpokes(SpokeNames(5)...)
	servers, guests := groupSpokes(all, 2)
	var got []string
	for _, g := range guests {
		got = append(got, g.opts.Name+"@"+g.host)
	}
	if diff := cmp.Diff([]string{"wharf", "pier", "jetty"}, names(servers)); diff != "" {
		t.Errorf("servers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"dock@wharf", "quay@pier"}, got); diff != "" {
		t.Errorf("guests (-want +got):\n%s", diff)
	}
	if servers, guests := groupSpokes(all, 1); len(servers) != 5 || guests != nil {
		t.Errorf("one per server: %d servers, guests %v", len(servers), guests)
	}
}

// What needs a server of its own is refused for a guest, naming the spoke,
// its host and the option; a negative count is refused.
func TestValidateGuests(t *testing.T) {
	o := Options{SpokesPerServer: 2, Spokes: []SpokeOptions{
		{Name: "wharf", Issuer: "https://wharf.example.com"}, // a server may
		{Name: "dock", Issuer: "https://dock.example.com", NoRunLive: true, Nodes: []NodeSpec{{Name: "gpu-0"}}},
	}}
	o.setDefaults()
	var msgs []string
	for _, err := range validateGuests(&o) {
		msgs = append(msgs, err.Error())
	}
	text := strings.Join(msgs, "\n")
	for _, want := range []string{
		"spoke dock shares wharf's API server (spokesPerServer 2) and cannot have issuer of its own",
		"cannot have noRunLive of its own", "cannot have nodes of its own",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("refusals:\n%s\nwant one containing %q", text, want)
		}
	}
	if len(msgs) != 3 {
		t.Errorf("%d refusals, want 3:\n%s", len(msgs), text)
	}
	if errs := validateGuests(&Options{SpokesPerServer: -1}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "spokesPerServer -1") {
		t.Errorf("a negative count: %v", errs)
	}
}
