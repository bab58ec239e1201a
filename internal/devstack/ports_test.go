package devstack

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// lockable reports whether port's lock file can be locked through a file
// of its own, as another process's stack would try.
func lockable(t *testing.T, port int) bool {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(claimsDir(), strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err != nil && !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatal(err)
	}
	return err == nil // closing f drops the lock again
}

// The ports a stack chooses are claimed across processes until it stops:
// no other stack, in this process or another, may choose them meanwhile,
// and a port another process claimed is never chosen.
func TestPortClaims(t *testing.T) {
	s := &Stack{}
	ports, err := s.freePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := portRange()
	for _, p := range ports {
		if p < lo || p >= hi {
			t.Errorf("port %d outside [%d, %d)", p, lo, hi)
		}
		if lockable(t, p) {
			t.Errorf("port %d: another process could claim it while the stack holds it", p)
		}
		if claimPort(p) {
			t.Errorf("port %d: claimed twice in one process", p)
		}
	}
	s.Stop()
	for _, p := range ports {
		if !lockable(t, p) {
			t.Errorf("port %d still claimed after Stop", p)
		}
	}

	// Held by "another process": a lock through a file of its own.
	foreign := ports[0]
	f, err := os.OpenFile(filepath.Join(claimsDir(), strconv.Itoa(foreign)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if claimPort(foreign) {
		t.Errorf("port %d claimed while another process holds it", foreign)
		releasePorts([]int{foreign})
	}
}
