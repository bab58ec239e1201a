package certpool

import (
	"crypto/x509"
	"fmt"
	"os"
)

// Load reads the PEM bundle at path into a pool.
func Load(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, path)
}

// Parse is the pool of the PEM certificates in data; source names data in
// the error when none parses (a file's path, a configuration key).
func Parse(data []byte, source string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no PEM certificate", source)
	}
	return pool, nil
}
