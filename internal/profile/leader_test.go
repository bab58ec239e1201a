package profile

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const pgDSN = "postgres://crucible@db.example.com/crucible"

func TestLeaderElectionProblems(t *testing.T) {
	tests := []struct {
		name string
		edit func(m map[string]any)
		want []string
	}{
		{
			name: "leader_elect with the default SQLite store",
			edit: func(m map[string]any) { table(m, "controller")["leader_elect"] = true },
			want: []string{`controller.leader_elect "true": needs a postgres:// store: SQLite is a file on one replica's disk (and its artifacts a local directory), ` +
				`so replicas would each see their own work pods and artifacts; use PostgreSQL for more than one replica`},
		},
		{
			name: "leader_elect not a boolean",
			edit: func(m map[string]any) { table(m, "controller")["leader_elect"] = "yes" },
			want: []string{`controller.leader_elect: must be true or false, not a string`},
		},
		{
			name: "renew deadline not shorter than the lease",
			edit: func(m map[string]any) {
				table(m, "controller")["leader_elect"], table(m, "controller")["store"] = true, pgDSN
				table(m, "leader_election")["lease_duration"], table(m, "leader_election")["renew_deadline"] = "10s", "10s"
			},
			want: []string{`leader_election.renew_deadline "10s": must be shorter than lease_duration`},
		},
		{
			name: "retry period too close to the renew deadline",
			edit: func(m map[string]any) {
				table(m, "controller")["leader_elect"], table(m, "controller")["store"] = true, pgDSN
				table(m, "leader_election")["retry_period"] = "9s"
			},
			want: []string{`leader_election.retry_period "9s": must be shorter than renew_deadline / 1.2`},
		},
		{
			name: "bad lease names and a negative duration",
			edit: func(m map[string]any) {
				table(m, "controller")["leader_elect"], table(m, "controller")["store"] = true, pgDSN
				le := table(m, "leader_election")
				le["lease_name"], le["lease_namespace"], le["retry_period"] = "Leader/1", "a.b", "-2s"
			},
			want: []string{
				`leader_election.lease_name "Leader/1": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
				`leader_election.lease_name "Leader/1": must be a DNS label`,
				`leader_election.lease_namespace "a.b": must be a DNS label`,
				`leader_election.retry_period "-2s": must be positive`,
			},
		},
		{
			name: "sharded spokes with a dotted lease name and a fractional lease",
			edit: func(m map[string]any) {
				table(m, "controller")["leader_elect"], table(m, "controller")["store"] = true, pgDSN
				le := table(m, "leader_election")
				le["lease_name"], le["lease_duration"] = "crucible.leader", "15500ms"
			},
			want: []string{
				`leader_election.lease_name "crucible.leader": must be a DNS label`,
				`leader_election.lease_duration "15.5s": must be whole seconds: each spoke's Lease records seconds (or set single_leader)`,
			},
		},
		{
			name: "unknown key",
			edit: func(m map[string]any) { table(m, "leader_election")["lease"] = "x" },
			want: []string{`leader_election.lease: unknown key`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := minimal()
			tt.edit(m)
			data := encode(t, m)
			_, err := Parse(data)
			perr, ok := errors.AsType[*ProfileError](err)
			if !ok {
				t.Fatalf("Parse: %v, want a *ProfileError\n%s", err, data)
			}
			if diff := cmp.Diff(tt.want, perr.Problems()); diff != "" {
				t.Errorf("problems (-want +got):\n%s\ninput:\n%s", diff, data)
			}
		})
	}
}

func TestLeaderElectionOnPostgres(t *testing.T) {
	m := minimal()
	table(m, "controller")["leader_elect"], table(m, "controller")["store"], table(m, "controller")["instance"] = true, pgDSN, "prod"
	p, err := Parse(encode(t, m))
	if err != nil {
		t.Fatal(err)
	}
	want := LeaderElection{LeaseName: "prod-leader", LeaseNamespace: "crucible", LeaseDuration: Duration{15 * time.Second},
		RenewDeadline: Duration{10 * time.Second}, RetryPeriod: Duration{2 * time.Second}}
	if diff := cmp.Diff(want, p.LeaderElection); diff != "" || !p.Controller.LeaderElect {
		t.Errorf("leader election (-want +got):\n%s (leader_elect %v)", diff, p.Controller.LeaderElect)
	}
}
