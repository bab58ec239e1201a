package fleet

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/profile"
)

// Update builds new clients first and changes nothing when one cannot be
// built; it keeps an unchanged client, replaces a changed one, keeps a
// removed one draining until Forget, and gives one listed again a new
// client.
func TestClientsUpdate(t *testing.T) {
	s := newFakeSpoke(t)
	wharf, dock, pier := entryFor(t, "wharf", s, "w"), entryFor(t, "dock", s, "d"), entryFor(t, "pier", s, "p")
	cs := newClientsT(t, wharf, dock)
	w0, _ := cs.Get("wharf")
	d0, _ := cs.Get("dock")
	names := func() []string {
		var out []string
		for _, c := range cs.All() {
			out = append(out, c.Entry.Name)
		}
		return out
	}

	// A new entry whose token file is missing fails the update whole.
	broken := pier
	broken.TokenFile = filepath.Join(t.TempDir(), "absent")
	_, err := cs.Update([]profile.ClusterEntry{wharf, broken})
	if err == nil || !strings.Contains(err.Error(), "cluster pier: ") || !strings.Contains(err.Error(), broken.TokenFile) {
		t.Fatalf("Update with pier's token file missing: %v, want a missing file naming pier", err)
	}
	if diff := cmp.Diff([]string{"wharf", "dock"}, names()); diff != "" || cs.Draining("dock") {
		t.Fatalf("after a refused update (-want +got):\n%s draining dock %v", diff, cs.Draining("dock"))
	}

	// pier added, dock removed, wharf's QPS changed.
	wharf2 := wharf
	wharf2.QPS = 7
	ch, err := cs.Update([]profile.ClusterEntry{pier, wharf2})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Changes{Added: []string{"pier"}, Changed: []string{"wharf"}, Removed: []string{"dock"}}, ch); diff != "" {
		t.Errorf("Changes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"pier", "wharf", "dock"}, names()); diff != "" {
		t.Errorf("All after the update (-want +got):\n%s", diff)
	}
	if w, _ := cs.Get("wharf"); w == w0 || w.Config.QPS != 7 {
		t.Errorf("wharf keeps its old client (QPS %v)", w.Config.QPS)
	}
	if d, ok := cs.Get("dock"); !ok || d != d0 || !cs.Draining("dock") || cs.Draining("wharf") {
		t.Errorf("dock: kept %v, same client %v, draining %v; wharf draining %v", ok, d == d0, cs.Draining("dock"), cs.Draining("wharf"))
	}

	// The same entries again: nothing changes, and dock stays draining.
	p1, _ := cs.Get("pier")
	if ch, err := cs.Update([]profile.ClusterEntry{pier, wharf2}); err != nil || !ch.Empty() {
		t.Errorf("the same entries: %+v, %v; want no change", ch, err)
	}
	if p, _ := cs.Get("pier"); p != p1 || !cs.Draining("dock") {
		t.Errorf("an unchanged update replaced pier's client (%v) or ended dock's drain (%v)", p != p1, !cs.Draining("dock"))
	}

	// dock listed again while draining: a new client, not draining.
	ch, err = cs.Update([]profile.ClusterEntry{pier, wharf2, dock})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Changes{Returned: []string{"dock"}}, ch); diff != "" {
		t.Errorf("Changes, dock listed again (-want +got):\n%s", diff)
	}
	if d, _ := cs.Get("dock"); d == d0 || cs.Draining("dock") {
		t.Errorf("dock listed again: same client %v, draining %v", d == d0, cs.Draining("dock"))
	}
	cs.Forget("dock") // not draining: kept
	if _, ok := cs.Get("dock"); !ok {
		t.Error("Forget dropped a listed cluster")
	}

	// Removed and forgotten.
	if _, err := cs.Update([]profile.ClusterEntry{wharf2}); err != nil {
		t.Fatal(err)
	}
	cs.Forget("pier")
	if diff := cmp.Diff([]string{"wharf", "dock"}, names()); diff != "" {
		t.Errorf("after Forget(pier) (-want +got):\n%s", diff)
	}
	if _, ok := cs.Get("pier"); ok || cs.Draining("pier") || !cs.Draining("dock") {
		t.Errorf("pier still known (%v, draining %v) or dock not draining", ok, cs.Draining("pier"))
	}
	if _, err := cs.Update([]profile.ClusterEntry{wharf2, wharf2}); err == nil || !strings.Contains(err.Error(), "cluster wharf: defined twice") {
		t.Errorf("Update with wharf twice: %v", err)
	}
}

// Update builds its new clients without holding readers up: while a new
// entry's token file cannot be read yet (a FIFO nobody writes), Get, All
// and Draining answer with the clients as they were, and once it can be
// read the update lands whole.
func TestClientsUpdateDoesNotBlockReaders(t *testing.T) {
	s := newFakeSpoke(t)
	wharf, pier := entryFor(t, "wharf", s, "w"), entryFor(t, "pier", s, "p")
	cs := newClientsT(t, wharf)
	pier.TokenFile = filepath.Join(t.TempDir(), "token-fifo")
	if err := syscall.Mkfifo(pier.TokenFile, 0o600); err != nil {
		t.Fatal(err)
	}
	updated := make(chan error, 1)
	go func() {
		_, err := cs.Update([]profile.ClusterEntry{wharf, pier})
		updated <- err
	}()
	read := make(chan []string, 1)
	go func() {
		var names []string
		for _, c := range cs.All() {
			names = append(names, c.Entry.Name)
		}
		_, ok := cs.Get("wharf")
		if ok && !cs.Draining("wharf") {
			read <- names
		}
	}()
	select {
	case names := <-read:
		if diff := cmp.Diff([]string{"wharf"}, names); diff != "" {
			t.Errorf("clients read during the update (-want +got):\n%s", diff)
		}
	case err := <-updated:
		t.Fatalf("the update returned (%v) before its token file was written", err)
	case <-time.After(30 * time.Second): // a deadlock, not a slow machine
		t.Fatal("readers were held up while the update built its clients")
	}
	f, err := os.OpenFile(pier.TokenFile, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("pier-token"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := <-updated; err != nil {
		t.Fatalf("update: %v", err)
	}
	if _, ok := cs.Get("pier"); !ok {
		t.Error("pier not added once its token could be read")
	}
}
