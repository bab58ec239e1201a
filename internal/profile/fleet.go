package profile

import (
	"maps"
	"reflect"
	"slices"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// DefaultAccessProvider is the access provider a ClusterProfile lists for
// crucible: the name `crucible render clusterprofile` writes.
const DefaultAccessProvider = "crucible"

// The ClusterProfile properties (status.properties) that set a spoke's
// keys over [fleet.cluster_defaults]: both name things on the spoke itself,
// which its cluster manager knows best.
const (
	PropertyLoopNamespace      = "crucible.dev/loop-namespace"
	PropertyTurnServiceAccount = "crucible.dev/turn-service-account"
)

// setFleetDefaults names crucible's access provider when [fleet] reads
// ClusterProfiles.
func setFleetDefaults(f *Fleet) {
	if f.ClusterProfiles != "" {
		setZero(&f.AccessProvider, DefaultAccessProvider)
	}
}

// validateFleet checks [fleet]: a namespace and selector the hub accepts,
// and cluster defaults that make a valid [[clusters]] entry once a
// ClusterProfile adds its name, server and CA.
func validateFleet(f *Fleet, classes []PodClass, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if f.ClusterProfiles == "" {
		if f.Selector != "" || f.AccessProvider != "" || f.ServerPins != "" || !isZeroEntry(&f.ClusterDefaults) {
			errs = append(errs, field.Forbidden(path.Child("cluster_profiles"), "required by the other [fleet] keys (the hub namespace whose ClusterProfiles become spokes)"))
		}
		return errs
	}
	errs = append(errs, dnsLabel(path.Child("cluster_profiles"), f.ClusterProfiles)...)
	if _, err := labels.Parse(f.Selector); err != nil {
		errs = append(errs, field.Invalid(path.Child("cluster_profile_selector"), f.Selector, err.Error()))
	}
	errs = append(errs, dnsLabel(path.Child("access_provider"), f.AccessProvider)...)
	d, cd := path.Child("cluster_defaults"), &f.ClusterDefaults
	// The keys each ClusterProfile sets for its own spoke, in file order.
	for _, own := range []struct{ key, value string }{
		{"name", cd.Name}, {"server", cd.Server}, {"ca_file", cd.CAFile}, {"token_file", cd.TokenFile}, {"token_audience", cd.TokenAudience},
	} {
		if own.value != "" {
			errs = append(errs, field.Forbidden(d.Child(own.key), "each ClusterProfile sets its spoke's own (the name, its server and CA, a requested token of the name's audience)"))
		}
	}
	if ts := f.ClusterDefaults.TokenSource; ts != "" && ts != TokenSourceRequest {
		errs = append(errs, field.NotSupported(d.Child("token_source"), ts, []string{TokenSourceRequest}))
	}
	if len(errs) > 0 {
		return errs
	}
	// What a ClusterProfile adds, so that every other key is checked as in
	// a [[clusters]] entry; the two a property may set are optional here.
	e := FleetEntry(f, "cluster-profile", "https://cluster-profile.invalid", []byte("-"))
	setZero(&e.LoopNamespace, "loops")
	setZero(&e.TurnServiceAccount, "turn")
	errs = append(errs, validateCluster(&e, d)...)
	return append(errs, validateClusterClasses(&e, classes, d)...)
}

// FleetEntry is the [[clusters]] entry of the spoke a ClusterProfile called
// name makes: [fleet.cluster_defaults] with the profile's server and CA and
// a token requested from the hub with the name as its audience, defaults
// applied. The caller sets the properties' keys and validates it
// (ValidateFleetEntry).
func FleetEntry(f *Fleet, name, server string, caData []byte) ClusterEntry {
	e := f.ClusterDefaults
	e.Classes = maps.Clone(f.ClusterDefaults.Classes)
	e.RunLivePorts = slices.Clone(f.ClusterDefaults.RunLivePorts)
	e.Name, e.Server, e.CAData = name, server, caData
	e.TokenSource = TokenSourceRequest
	entries := []ClusterEntry{e}
	setClusterDefaults(entries)
	return entries[0]
}

// ValidateFleetEntry checks a spoke made from a ClusterProfile as a
// [[clusters]] entry of p would be, and against p's own entries: a name,
// token audience or ingest audience one of them has already would let the
// ClusterProfile's writer take that spoke's tokens, or make its own tokens
// good at the drop-box. Every problem is in the *ProfileError, under the
// entry's name.
func ValidateFleetEntry(p *Profile, e *ClusterEntry) error {
	path := field.NewPath("fleet").Child("cluster_profiles").Key(e.Name)
	errs := validateCluster(e, path)
	errs = append(errs, validateClusterClasses(e, p.Pods.Classes, path)...)
	aud := path.Child("token_audience")
	for i, c := range p.Clusters {
		at := field.NewPath("clusters").Index(i)
		switch {
		case c.Name == e.Name:
			errs = append(errs, withDetail(field.Duplicate(path.Child("name"), e.Name), "duplicate of "+at.Child("name").String()+": a ClusterProfile may not take a spoke of the file's"))
		case e.TokenAudience == c.Name || e.TokenAudience == c.TokenAudience:
			errs = append(errs, field.Invalid(aud, e.TokenAudience, "is "+at.String()+"'s audience: each spoke's token must be good for that spoke alone"))
		}
		if e.TokenAudience == c.IngestAudience {
			errs = append(errs, field.Invalid(aud, e.TokenAudience, "must differ from "+at.Child("ingest_audience").String()+": the drop-box would accept this spoke's token"))
		}
	}
	if e.TokenAudience == e.IngestAudience {
		errs = append(errs, field.Invalid(aud, e.TokenAudience, "must differ from the spoke's ingest_audience: the drop-box would accept this spoke's token"))
	}
	if slices.Contains(hubAPIAudiences, e.TokenAudience) {
		errs = append(errs, field.Invalid(aud, e.TokenAudience, "must not be one of the hub API's audiences: the token would be a hub credential"))
	}
	if len(errs) > 0 {
		return &ProfileError{Errs: errs}
	}
	return nil
}

func isZeroEntry(e *ClusterEntry) bool { return reflect.DeepEqual(*e, ClusterEntry{}) }
