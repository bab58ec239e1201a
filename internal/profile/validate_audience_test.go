package profile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// requestCluster is a spoke whose token comes from the hub's TokenRequest
// API with the given audience.
func requestCluster(name, audience string) ClusterEntry {
	c := wantDefaults().Clusters[0]
	c.Name, c.TokenSource, c.TokenFile, c.TokenAudience = name, TokenSourceRequest, "", audience
	c.TokenExpiration = Duration{MinTokenExpiration}
	return c
}

// Each requested spoke token is good for its spoke alone: every clash is
// reported at once, each with the key path of the audience at fault and of
// the key it clashes with.
func TestValidateTokenAudiences(t *testing.T) {
	tests := []struct {
		name     string
		clusters []ClusterEntry
		want     []string
	}{
		{"distinct", []ClusterEntry{requestCluster("wharf", "wharf"), requestCluster("pier", "pier")}, nil},
		{"a token file has no audience of the profile's", []ClusterEntry{wantDefaults().Clusters[0], requestCluster("pier", "pier")}, nil},
		{"shared by two spokes", []ClusterEntry{requestCluster("wharf", "spokes"), requestCluster("pier", "spokes")},
			[]string{`clusters[1].token_audience "spokes": duplicate of clusters[0].token_audience: each spoke's token must be good for that spoke alone`}},
		{"an ingest audience, of another spoke too", []ClusterEntry{requestCluster("wharf", "wharf"), requestCluster("pier", "crucible-ingest")},
			[]string{`clusters[1].token_audience "crucible-ingest": must differ from clusters[0].ingest_audience: the drop-box would accept this spoke's token`}},
		{"the hub API's", []ClusterEntry{requestCluster("wharf", "https://kubernetes.default.svc")},
			[]string{`clusters[0].token_audience "https://kubernetes.default.svc": must not be one of the hub API's audiences: the token would be a hub credential`}},
		{"all at once", []ClusterEntry{requestCluster("wharf", "crucible-ingest"), requestCluster("pier", "crucible-ingest"), requestCluster("dock", "https://kubernetes.default.svc.cluster.local")},
			[]string{
				`clusters[0].token_audience "crucible-ingest": must differ from clusters[0].ingest_audience: the drop-box would accept this spoke's token`,
				`clusters[1].token_audience "crucible-ingest": duplicate of clusters[0].token_audience: each spoke's token must be good for that spoke alone`,
				`clusters[1].token_audience "crucible-ingest": must differ from clusters[0].ingest_audience: the drop-box would accept this spoke's token`,
				`clusters[2].token_audience "https://kubernetes.default.svc.cluster.local": must not be one of the hub API's audiences: the token would be a hub credential`,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := wantDefaults()
			p.Clusters = tt.clusters
			var got []string
			for _, e := range validateProfile(p) {
				got = append(got, problemText(e))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A reload reads the file with Load, as the start does (internal/cli's
// controller command hands it to the reloader), so a rewritten profile
// whose new spoke reuses another's token audience is refused whole.
func TestReloadRefusesSharedTokenAudience(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crucible.toml")
	m := minimal()
	cluster(m, 0)["token_source"] = TokenSourceRequest
	delete(cluster(m, 0), "token_file")
	if err := os.WriteFile(path, encode(t, m), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err != nil {
		t.Fatalf("the profile the controller starts with: %v", err)
	}
	pier := clusterTree("pier")
	pier["token_source"], pier["token_audience"] = TokenSourceRequest, "wharf"
	delete(pier, "token_file")
	m["clusters"] = append(m["clusters"].([]map[string]any), pier)
	m["default_cluster"] = "wharf"
	if err := os.WriteFile(path, encode(t, m), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	perr, ok := errors.AsType[*ProfileError](err)
	if !ok {
		t.Fatalf("reloaded profile: %v, want a *ProfileError", err)
	}
	if msg := perr.Error(); !strings.Contains(msg, `clusters[1].token_audience "wharf": duplicate of clusters[0].token_audience`) {
		t.Errorf("reload refusal %q does not name clusters[1].token_audience", msg)
	}
}
