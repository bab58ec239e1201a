package cli

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/devstack"
)

func TestParseSpokes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		want   []string
	}{
		{"the default", []string{"wharf"}, []string{"wharf"}},
		{"names", []string{"wharf", "dock", "gpu-east"}, []string{"wharf", "dock", "gpu-east"}},
		{"a name with digits", []string{"east-2", "3a"}, []string{"east-2", "3a"}},
		{"one", []string{"1"}, []string{"wharf"}},
		{"three", []string{"3"}, []string{"wharf", "dock", "pier"}},
		{"a plus sign", []string{"+2"}, []string{"wharf", "dock"}},
		{"ten", []string{"10"}, []string{"wharf", "dock", "pier", "quay", "jetty", "berth", "slip", "mole", "marina", "haven"}},
		{"the cap", []string{"30"}, devstack.SpokeNames(30)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSpokes(tc.values, 1)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseSpokes(%q) (-want +got):\n%s", tc.values, diff)
			}
		})
	}
}

func TestParseSpokesRefuses(t *testing.T) {
	const dnsLabel = "a lowercase RFC 1123 label must consist of"
	for _, tc := range []struct {
		name   string
		values []string
		want   string // the whole error, or its start when it ends in dnsLabel
	}{
		{"nothing", nil, `--spokes "": give a count (--spokes 3) or names (--spokes wharf,dock)`},
		{"zero", []string{"0"}, `--spokes "0": a count of spokes is from 1 to 30`},
		{"negative", []string{"-2"}, `--spokes "-2": a count of spokes is from 1 to 30`},
		{"past the cap", []string{"31"}, `--spokes "31": a count of spokes is from 1 to 30`},
		{"past int", []string{"99999999999999999999"}, `--spokes "99999999999999999999": a count of spokes is from 1 to 30`},
		{"a count among names", []string{"wharf", "3"}, `--spokes "wharf,3": "3" is a number: give a count alone, or only names`},
		{"two counts", []string{"2", "3"}, "--spokes \"2,3\": \"2\" is a number: give a count alone, or only names\n\"3\" is a number: give a count alone, or only names"},
		{"twice", []string{"wharf", "dock", "wharf"}, `--spokes "wharf,dock,wharf": "wharf" is named twice`},
		{"upper case", []string{"Wharf"}, `--spokes "Wharf": "Wharf" is no spoke name: ` + dnsLabel},
		{"a trailing comma", []string{"wharf", ""}, `--spokes "wharf,": "" is no spoke name: ` + dnsLabel},
		{"a number with a unit", []string{"3x", "dock_2"}, `--spokes "3x,dock_2": "dock_2" is no spoke name: ` + dnsLabel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSpokes(tc.values, 1)
			if err == nil {
				t.Fatalf("parseSpokes(%q) = %q, want an error", tc.values, got)
			}
			msg := err.Error()
			prefixOK := strings.HasSuffix(tc.want, dnsLabel) && strings.HasPrefix(msg, tc.want)
			if msg != tc.want && !prefixOK {
				t.Errorf("parseSpokes(%q) error:\n%s\nwant:\n%s", tc.values, msg, tc.want)
			}
		})
	}
}

// A bad --spokes fails dev up before it looks at the directory or starts
// anything.
func TestDevUpRefusesBadSpokes(t *testing.T) {
	dir := t.TempDir()
	var stderr bytes.Buffer
	err := Run(t.Context(), []string{"dev", "up", "--dir", dir, "--spokes", "2,dock"}, io.Discard, &stderr)
	want := `--spokes "2,dock": "2" is a number: give a count alone, or only names`
	if err == nil || err.Error() != want {
		t.Fatalf("dev up --spokes 2,dock: err = %v, want %s", err, want)
	}
	if stderr.Len() != 0 {
		t.Errorf("dev up wrote %q before refusing", stderr.String())
	}
}

func TestPrintCosts(t *testing.T) {
	const mi = 1 << 20
	costs := []devstack.Cost{
		{Spoke: "wharf", Processes: []devstack.ProcessCost{
			{Name: "kube-apiserver-wharf", PID: 10, RSS: 200 * mi, Anon: 120 * mi},
			{Name: "kwok-wharf", PID: 11, Exited: true},
		}},
		{Spoke: "dock", Processes: []devstack.ProcessCost{{Name: "kube-apiserver-dock", PID: 12, RSS: 100*mi + 5, Anon: 80 * mi}}},
		{Processes: []devstack.ProcessCost{{Name: "etcd", PID: 1, RSS: 50 * mi, Anon: 30 * mi}, {Name: "kube-apiserver-hub", PID: 2, RSS: 250 * mi, Anon: 150 * mi}}},
	}
	var out bytes.Buffer
	printCosts(&out, costs)
	want := `
memory at start: resident (RSS), of it private (anonymous: what one more spoke adds)
  wharf       200 MiB, private  120 MiB  (RSS MiB: kube-apiserver 200, kwok exited)
  dock        100 MiB, private   80 MiB  (RSS MiB: kube-apiserver 100)
  shared      300 MiB, private  180 MiB  (RSS MiB: etcd 50, kube-apiserver-hub 250)
  total       600 MiB  (2 spokes 300 MiB, a spoke 150 MiB, private 100 MiB; shared 300 MiB)
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("printCosts (-want +got):\n%s", diff)
	}
}

// With spokes sharing API servers the cap counts servers: thirty of them.
func TestParseSpokesPerServer(t *testing.T) {
	names, err := parseSpokes([]string{"100"}, 25)
	if err != nil || len(names) != 100 || names[99] != "spoke-100" {
		t.Fatalf("parseSpokes(100, 25) = %d names (last %q), %v", len(names), names[len(names)-1], err)
	}
	_, err = parseSpokes([]string{"751"}, 25)
	if want := `--spokes "751": a count of spokes is from 1 to 750 (30 API servers of 25 spokes)`; err == nil || err.Error() != want {
		t.Errorf("parseSpokes(751, 25): %v, want %s", err, want)
	}
}

// A server's guests are counted on its line, the label column as wide as
// the widest; the total says servers and spokes apart.
func TestPrintCostsSharedServers(t *testing.T) {
	const mi = 1 << 20
	costs := []devstack.Cost{
		{Spoke: "wharf", Guests: []string{"dock", "pier", "quay"}, Processes: []devstack.ProcessCost{{Name: "kube-apiserver-wharf", PID: 10, RSS: 200 * mi, Anon: 120 * mi}}},
		{Spoke: "spoke-26", Guests: []string{"spoke-27", "spoke-28", "spoke-29"}, Processes: []devstack.ProcessCost{{Name: "kube-apiserver-spoke-26", PID: 11, RSS: 200 * mi, Anon: 100 * mi}}},
		{Processes: []devstack.ProcessCost{{Name: "etcd", PID: 1, RSS: 50 * mi, Anon: 30 * mi}}},
	}
	var out bytes.Buffer
	printCosts(&out, costs)
	want := `
memory at start: resident (RSS), of it private (anonymous: what one more spoke adds)
  wharf +3     200 MiB, private  120 MiB  (RSS MiB: kube-apiserver 200)
  spoke-26 +3  200 MiB, private  100 MiB  (RSS MiB: kube-apiserver 200)
  shared        50 MiB, private   30 MiB  (RSS MiB: etcd 50)
  total        450 MiB  (2 API servers 400 MiB for 8 spokes: a server 200 MiB, private 110 MiB; a spoke 50 MiB; shared 50 MiB)
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("printCosts (-want +got):\n%s", diff)
	}
}
