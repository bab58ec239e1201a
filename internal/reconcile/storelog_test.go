package reconcile

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"crucible.dev/crucible/internal/artifact"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/storetest"
)

func hexSum(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// logSource serves content as a pod's log and counts the fetches.
type logSource struct {
	content string
	err     error
	fetches int
}

func (l *logSource) fetch(consume func(io.Reader) error) error {
	l.fetches++
	if l.err != nil {
		return l.err
	}
	return consume(strings.NewReader(l.content))
}

// TestStoreLogTrustsOnlyTheController: a "log" record a pod made is not the
// collected log; collection stores the real one over it, and the bytes
// served for the record are the real log's.
func TestStoreLogTrustsOnlyTheController(t *testing.T) {
	const real, forged = "real log line\n", "forged by the pod\n"
	tests := []struct {
		name        string
		before      *store.Artifact // recorded before collection, with its file
		beforeBytes string
		fetchErr    error
		wantFetches int
		want        *store.Artifact // nil: no record
		wantBytes   string
		wantErr     bool
	}{
		{name: "nothing recorded", wantFetches: 1,
			want: &store.Artifact{PodID: "wp", Kind: artifact.LogKind, Size: int64(len(real)), SHA256: hexSum(real), Source: store.SourceController}, wantBytes: real},
		{name: "a pod's log record is replaced",
			before:      &store.Artifact{PodID: "wp", Kind: artifact.LogKind, Size: int64(len(forged)), SHA256: hexSum(forged), Source: store.SourcePod},
			beforeBytes: forged, wantFetches: 1,
			want: &store.Artifact{PodID: "wp", Kind: artifact.LogKind, Size: int64(len(real)), SHA256: hexSum(real), Source: store.SourceController}, wantBytes: real},
		{name: "the controller's record stands",
			before:      &store.Artifact{PodID: "wp", Kind: artifact.LogKind, Size: 4, SHA256: hexSum("done"), Source: store.SourceController},
			beforeBytes: "done", wantFetches: 0,
			want: &store.Artifact{PodID: "wp", Kind: artifact.LogKind, Size: 4, SHA256: hexSum("done"), Source: store.SourceController}, wantBytes: "done"},
		{name: "fetch fails", fetchErr: errors.New("spoke down"), wantFetches: 1, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			st := storetest.SQLite(t)
			dir := artifact.Dir{Root: t.TempDir()}
			if _, err := st.CreateWorkPod(ctx, store.WorkPod{ID: "wp", Cluster: "wharf", State: store.StateRunning}); err != nil {
				t.Fatal(err)
			}
			if tc.before != nil {
				if _, err := dir.Write(ctx, "wp", artifact.LogKind, strings.NewReader(tc.beforeBytes), 1<<20); err != nil {
					t.Fatal(err)
				}
				if _, err := st.PutArtifact(ctx, *tc.before, store.Quota{}); err != nil {
					t.Fatal(err)
				}
			}
			src := &logSource{content: real, err: tc.fetchErr}
			r := &Reconciler{Store: st, Artifacts: dir}
			err := r.storeLog(ctx, "wp", profile.DefaultMaxLogBytes, src.fetch)
			if (err != nil) != tc.wantErr {
				t.Fatalf("storeLog: %v, wantErr %v", err, tc.wantErr)
			}
			if src.fetches != tc.wantFetches {
				t.Errorf("fetched %d times, want %d", src.fetches, tc.wantFetches)
			}
			got, err := st.GetArtifact(ctx, "wp", artifact.LogKind)
			if tc.want == nil {
				if !errors.Is(err, store.ErrNotFound) {
					t.Errorf("record after a failed fetch: %+v, %v", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(*tc.want, got, cmpopts.IgnoreFields(store.Artifact{}, "CreatedAt")); diff != "" {
				t.Errorf("record (-want +got):\n%s", diff)
			}
			f, err := dir.Open(ctx, "wp", artifact.LogKind, got.SHA256)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			b, _ := io.ReadAll(f)
			if string(b) != tc.wantBytes {
				t.Errorf("bytes served for the record = %q, want %q", b, tc.wantBytes)
			}
		})
	}
}
