package certpool

import (
	"os"
	"path/filepath"
	"testing"

	"crucible.dev/crucible/internal/testpki"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "certpool test CA")
	good := filepath.Join(dir, "ca.pem")
	bad := filepath.Join(dir, "not-a-ca.pem")
	for path, data := range map[string][]byte{good: ca.PEM, bad: []byte("-----BEGIN CERTIFICATE-----\nnope\n")} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if pool, err := Load(good); err != nil || !pool.Equal(ca.Pool()) {
		t.Errorf("Load(a CA file) = %v, %v; want the CA's pool", pool, err)
	}
	if _, err := Load(bad); err == nil || err.Error() != bad+" holds no PEM certificate" {
		t.Errorf("Load(a file with no certificate) error = %v, want one naming the file", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.pem")); !os.IsNotExist(err) {
		t.Errorf("Load(a missing file) error = %v, want not exist", err)
	}
	if _, err := Parse([]byte("x"), "certificateAuthority"); err == nil || err.Error() != "certificateAuthority holds no PEM certificate" {
		t.Errorf("Parse(no certificate) error = %v, want one naming the source", err)
	}
}
