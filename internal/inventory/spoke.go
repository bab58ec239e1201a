// Package inventory owns the fleet a cluster manager describes: the
// consumer side of KEP-4322. The ClusterProfiles of one hub namespace that
// list crucible's access provider become spokes (Spoke), followed as they
// are created, changed and deleted (Watcher); the controller adds them to
// its [[clusters]] as a reload adds profile entries.
//
// A ClusterProfile's status is written by whoever holds that RBAC on the
// hub. What it may choose is bounded here: the spoke's name is the
// object's, its token's audience is that name and no other (never one of
// [[clusters]]' or the drop-box's), the server must be https with a CA of
// its own in the object (no file path, proxy, TLS name or skip-verify),
// and with [fleet] server_pins the server and CA must be the ones pinned
// for the name (package serverpin).
package inventory

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/render"
	"crucible.dev/crucible/internal/serverpin"
)

// ErrNotListed: the ClusterProfile lists no access provider of crucible's;
// it is there for other consumers and makes no spoke.
var ErrNotListed = errors.New("lists no access provider of crucible's")

// Spoke is the [[clusters]] entry cp makes beside p's own (p is the profile
// as its file says, [fleet] included), or why it makes none: ErrNotListed,
// or a refusal naming the object and what is wrong with it. pins, when not
// nil, are [fleet] server_pins.
func Spoke(cp *cpv1alpha1.ClusterProfile, p *profile.Profile, pins map[string]render.ServerPin) (profile.ClusterEntry, error) {
	provider, ok := accessProvider(cp, p.Fleet.AccessProvider)
	if !ok {
		return profile.ClusterEntry{}, ErrNotListed
	}
	fail := func(format string, a ...any) (profile.ClusterEntry, error) {
		return profile.ClusterEntry{}, fmt.Errorf("ClusterProfile %s/%s: %s", cp.Namespace, cp.Name, fmt.Sprintf(format, a...))
	}
	where := "status.accessProviders[" + provider.Name + "].cluster"
	c := provider.Cluster
	switch {
	case c.Server == "":
		return fail("%s.server is empty", where)
	case c.InsecureSkipTLSVerify:
		return fail("%s.insecure-skip-tls-verify is set: a spoke's token goes only to a server its CA verifies", where)
	case c.CertificateAuthority != "":
		return fail("%s.certificate-authority names a file (%q): the CA must be in the object, as certificate-authority-data", where, c.CertificateAuthority)
	case len(c.CertificateAuthorityData) == 0:
		return fail("%s.certificate-authority-data is empty: the controller trusts no system roots for a spoke", where)
	case c.TLSServerName != "":
		return fail("%s.tls-server-name is set (%q): the server's certificate must name the server", where, c.TLSServerName)
	case c.ProxyURL != "":
		return fail("%s.proxy-url is set: a spoke's token goes to the server directly", where)
	}
	if u, err := url.Parse(c.Server); err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fail("%s.server %q: want an https URL with no user, query or fragment", where, c.Server)
	}
	if _, err := render.CACertificates(c.CertificateAuthorityData); err != nil {
		return fail("%s.certificate-authority-data: %v", where, err)
	}
	if a, err := extensionAudience(c.Extensions); err != nil {
		return fail("%s.extensions: %v", where, err)
	} else if a != "" && a != cp.Name {
		return fail("%s.extensions asks for audience %q: a ClusterProfile-made spoke's token is for its name, %s", where, a, cp.Name)
	}
	if pins != nil {
		pin, ok := pins[cp.Name]
		if !ok {
			return fail("no pin for %s in [fleet] server_pins: its token goes only to a server the pins name", cp.Name)
		}
		if err := serverpin.Check(pin, serverpin.Cluster{Server: c.Server, CAData: c.CertificateAuthorityData, Field: where}); err != nil {
			return fail("%v", err)
		}
		if a := serverpin.Audience(pin); a != cp.Name {
			return fail("the pin for %s allows audience %q, and a ClusterProfile-made spoke's token is for its name", cp.Name, a)
		}
	}
	e := profile.FleetEntry(&p.Fleet, cp.Name, c.Server, c.CertificateAuthorityData)
	for _, prop := range cp.Status.Properties {
		switch prop.Name {
		case profile.PropertyLoopNamespace:
			e.LoopNamespace = prop.Value
		case profile.PropertyTurnServiceAccount:
			e.TurnServiceAccount = prop.Value
		}
	}
	if err := profile.ValidateFleetEntry(p, &e); err != nil {
		var perr *profile.ProfileError
		if errors.As(err, &perr) {
			return fail("%s", strings.Join(perr.Problems(), "; "))
		}
		return fail("%v", err)
	}
	return e, nil
}

// extensionAudience is the audience the exec extension `crucible render
// clusterprofile` writes names, if any: one that differs from the name
// is a spoke whose webhook expects another audience, and is refused
// rather than sent tokens it would reject.
func extensionAudience(exts []clientcmdv1.NamedExtension) (string, error) {
	for _, x := range exts {
		if x.Name != execExtensionName {
			continue
		}
		var v struct {
			Audience string `json:"audience"`
		}
		if err := json.Unmarshal(x.Extension.Raw, &v); err != nil {
			return "", fmt.Errorf("%s: %w", execExtensionName, err)
		}
		return v.Audience, nil
	}
	return "", nil
}

// execExtensionName is the cluster extension crucible's ClusterProfiles
// carry for exec plugins (package render).
const execExtensionName = "client.authentication.k8s.io/exec"

// accessProvider is cp's entry called name: status.accessProviders first,
// then the deprecated credentialProviders, as the API's own comment orders
// them.
func accessProvider(cp *cpv1alpha1.ClusterProfile, name string) (cpv1alpha1.AccessProvider, bool) {
	for _, list := range [][]cpv1alpha1.AccessProvider{cp.Status.AccessProviders, cp.Status.CredentialProviders} {
		for _, ap := range list {
			if ap.Name == name {
				return ap, true
			}
		}
	}
	return cpv1alpha1.AccessProvider{}, false
}
