package render

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
)

// The consumer's server pins (R-SEC1). A ClusterProfile's status is written
// by whoever holds that RBAC on the hub; what it says picks a spoke, and
// `crucible credential --server-pins` hands the spoke's token only to the
// server, CA and audience the consumer's own file pins for that spoke. The
// file sits beside the provider file, in the ConfigMap the consumer mounts.
const (
	// ServerPinsKey is the pins file's key in ProvidersConfigMap.
	ServerPinsKey = "server-pins.json"
	// ServerPinsPath is where the consumer's container sees it, and what
	// the provider file passes as --server-pins by default.
	ServerPinsPath = ProvidersMountPath + "/" + ServerPinsKey
)

// ServerPins is the --server-pins file.
type ServerPins struct {
	Clusters []ServerPin `json:"clusters"`
}

// ServerPin is one spoke as the consumer trusts it.
type ServerPin struct {
	Name string `json:"name"`
	// Server is the spoke API server's https URL.
	Server string `json:"server"`
	// CAData is the PEM bundle that verifies it; empty pins the system
	// roots (and a ClusterProfile that brings a CA is then refused).
	CAData []byte `json:"certificate-authority-data,omitempty"`
	// Audience is the one audience the spoke's token may carry; empty is
	// the name.
	Audience string `json:"audience,omitempty"`
}

// ServerPinsFile is the pins file for clusters, each with its server, CA
// and token audience (written out, the name included, so the file says
// everything the plugin checks).
func ServerPinsFile(clusters []AccessCluster) ([]byte, error) {
	if len(clusters) == 0 {
		return nil, errors.New("no clusters: the pins file needs at least one spoke")
	}
	pins := ServerPins{Clusters: make([]ServerPin, 0, len(clusters))}
	for _, c := range clusters {
		if err := c.check(); err != nil {
			return nil, err
		}
		if u, err := url.Parse(c.Server); err != nil || u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("cluster %s: server %q: want an https URL", c.Name, c.Server)
		}
		if len(c.CAPEM) > 0 {
			if _, err := CACertificates(c.CAPEM); err != nil {
				return nil, fmt.Errorf("cluster %s: CA: %w", c.Name, err)
			}
		}
		pins.Clusters = append(pins.Clusters, ServerPin{Name: c.Name, Server: c.Server, CAData: c.CAPEM, Audience: c.audience()})
	}
	out, err := json.MarshalIndent(pins, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode server pins: %w", err)
	}
	return append(out, '\n'), nil
}

// CACertificates is the DER of each certificate of a PEM bundle: the pin
// and the ClusterProfile compare by these, so that two encodings of the
// same CAs (line breaks, a trailing newline) are one bundle.
func CACertificates(bundle []byte) ([][]byte, error) {
	var certs [][]byte
	rest := bundle
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("a PEM block of type %q, want CERTIFICATE", b.Type)
		}
		certs = append(certs, b.Bytes)
	}
	if len(certs) == 0 || len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("not a PEM bundle of certificates")
	}
	return certs, nil
}
