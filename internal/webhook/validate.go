package webhook

import (
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/apis/apiserver"
	apiservervalidation "k8s.io/apiserver/pkg/apis/apiserver/validation"
)

// validateConfig turns the file into a Config, collecting every problem.
// Validation is pure apart from compiling CEL with the shared compiler.
func validateConfig(f *fileConfig) (*Config, field.ErrorList) {
	interval, errs := validateInterval(f.JWKSMinRefreshInterval, field.NewPath("jwksMinRefreshInterval"))
	cfg := &Config{JWKSMinRefreshInterval: interval}

	root := field.NewPath("providers")
	switch {
	case len(f.Providers) == 0:
		return cfg, append(errs, field.Required(root, "at least one provider is required"))
	case len(f.Providers) > maxProviders:
		return cfg, append(errs, field.TooMany(root, len(f.Providers), maxProviders))
	}

	seen := uniqueness{names: sets.New[string](), issuers: sets.New[string](), discoveryURLs: sets.New[string]()}
	for i := range f.Providers {
		p, perrs := validateProvider(&f.Providers[i], root.Index(i), &seen)
		errs = append(errs, perrs...)
		cfg.Providers = append(cfg.Providers, p)
	}
	return cfg, errs
}

// uniqueness tracks the values that must differ between providers.
type uniqueness struct {
	names, issuers, discoveryURLs sets.Set[string]
}

func validateInterval(s string, path *field.Path) (time.Duration, field.ErrorList) {
	if s == "" {
		return DefaultJWKSMinRefreshInterval, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, field.ErrorList{field.Invalid(path, s, "must be a duration such as 10s or 1m")}
	}
	if d < minJWKSMinRefreshInterval {
		return 0, field.ErrorList{field.Invalid(path, s, "must be at least "+minJWKSMinRefreshInterval.String())}
	}
	return d, nil
}

func validateProvider(fp *fileProvider, path *field.Path, seen *uniqueness) (ProviderConfig, field.ErrorList) {
	errs := validateName(fp.Name, path.Child("name"), seen.names)
	errs = append(errs, validateSubjects(fp.AllowedSubjects, path.Child("allowedSubjects"))...)

	jwt, err := convertJWT(&fp.JWTAuthenticator)
	if err != nil {
		return ProviderConfig{}, append(errs, field.Invalid(path, "<omitted>", "convert to kube-apiserver's internal type: "+err.Error()))
	}
	errs = append(errs, validateJWT(jwt, path, seen)...)
	grace, gerrs := validateOptionalDuration(fp.UnknownKeyIDGrace, path.Child("unknownKeyIDGrace"), DefaultUnknownKeyIDGrace, maxUnknownKeyIDGrace)
	errs = append(errs, gerrs...)
	maxAge, aerrs := validateOptionalDuration(fp.MaxKeyAge, path.Child("maxKeyAge"), DefaultMaxKeyAge, maxMaxKeyAge)
	errs = append(errs, aerrs...)
	return ProviderConfig{Name: fp.Name, AllowedSubjects: fp.AllowedSubjects, JWT: jwt, UnknownKeyIDGrace: grace, MaxKeyAge: maxAge}, errs
}

// validateOptionalDuration reads a duration setting: absent is def, "0s"
// turns its feature off, at most maxD.
func validateOptionalDuration(s *string, path *field.Path, def, maxD time.Duration) (time.Duration, field.ErrorList) {
	if s == nil {
		return def, nil
	}
	d, err := time.ParseDuration(*s)
	switch {
	case err != nil:
		return 0, field.ErrorList{field.Invalid(path, *s, "must be a duration such as 2m or 0s")}
	case d < 0 || d > maxD:
		return 0, field.ErrorList{field.Invalid(path, *s, "must be between 0s and "+maxD.String())}
	}
	return d, nil
}

func validateName(name string, path *field.Path, seen sets.Set[string]) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(path, "a DNS label naming the provider in logs and metrics")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(name) {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	if seen.Has(name) {
		errs = append(errs, field.Duplicate(path, name))
	}
	seen.Insert(name)
	return errs
}

// validateSubjects allows an empty list (nobody is accepted) but no empty or
// repeated entries, which are always mistakes.
func validateSubjects(subjects []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, s := range subjects {
		switch {
		case s == "":
			errs = append(errs, field.Required(path.Index(i), "an exact sub claim"))
		case seen.Has(s):
			errs = append(errs, field.Duplicate(path.Index(i), s))
		}
		seen.Insert(s)
	}
	return errs
}

// validateJWT applies crucible's rules, then kube-apiserver's validation of a
// jwt authenticator (URLs, audiences, CA, CEL) without the "disallowed
// issuer" rule: the hub's issuer equals the spoke's own by design.
func validateJWT(jwt apiserver.JWTAuthenticator, path *field.Path, seen *uniqueness) field.ErrorList {
	var errs field.ErrorList
	issuer := path.Child("issuer")
	if jwt.Issuer.EgressSelectorType != "" {
		errs = append(errs, field.Forbidden(issuer.Child("egressSelectorType"), "not supported by crucible's authn webhook, which makes its own connections"))
		jwt.Issuer.EgressSelectorType = ""
	}
	if u := jwt.Issuer.URL; u != "" {
		if seen.issuers.Has(u) {
			errs = append(errs, field.Duplicate(issuer.Child("url"), u))
		}
		seen.issuers.Insert(u)
	}
	if u := jwt.Issuer.DiscoveryURL; u != "" {
		if seen.discoveryURLs.Has(u) {
			errs = append(errs, field.Duplicate(issuer.Child("discoveryURL"), u))
		}
		seen.discoveryURLs.Insert(u)
	}
	_, libErrs := apiservervalidation.CompileAndValidateJWTAuthenticator(celCompiler(), jwt, nil)
	return append(errs, underPath(libErrs, path)...)
}

// underPath re-roots errors reported relative to one jwt entry (the library
// validates it with no parent path) under path, e.g. issuer.audiences becomes
// providers[0].issuer.audiences.
func underPath(errs field.ErrorList, path *field.Path) field.ErrorList {
	out := make(field.ErrorList, 0, len(errs))
	for _, e := range errs {
		re := *e
		switch e.Field {
		case "", "<nil>":
			re.Field = path.String()
		default:
			re.Field = path.String() + "." + e.Field
		}
		out = append(out, &re)
	}
	return out
}
