package profile

import (
	"reflect"
	"strings"
	"sync/atomic"
)

// What a running controller may take from a changed profile, and what it
// may not: a spoke added, changed or removed, and the pod classes, are
// applied at once (package controller); everything else — listeners, the
// store, API authentication, limits — was wired into the process when it
// started and needs a restart, which the reload names instead of half
// applying.

// reloadable are the profile keys a reload applies, by TOML path.
var reloadable = map[string]bool{
	"clusters":        true,
	"default_cluster": true,
	"pods.classes":    true,
}

// RestartNeeded lists the keys, by TOML path ("controller.store",
// "api.auth"), whose values differ between old and next, leaving out the
// ones a reload applies. A table is named by its deepest key that
// differs, so the list says exactly what to put back or restart for.
func RestartNeeded(old, next *Profile) []string {
	var keys []string
	diffKeys(reflect.ValueOf(*old), reflect.ValueOf(*next), "", &keys)
	return keys
}

// diffKeys appends the TOML paths under prefix where a and b (values of
// one struct type) differ, skipping the reloadable ones.
func diffKeys(a, b reflect.Value, prefix string, keys *[]string) {
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			continue
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		if reloadable[path] {
			continue
		}
		av, bv := a.Field(i), b.Field(i)
		if reflect.DeepEqual(av.Interface(), bv.Interface()) {
			continue
		}
		if av.Kind() == reflect.Struct && hasTOMLFields(av.Type()) {
			diffKeys(av, bv, path, keys)
			continue
		}
		*keys = append(*keys, path)
	}
}

// hasTOMLFields tells a profile table (a struct of keys) from a value
// written as one string, such as Duration.
func hasTOMLFields(t reflect.Type) bool {
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("toml") != "" {
			return true
		}
	}
	return false
}

// Current is the profile in force, swapped whole by a reload: a request
// reads it once and works with that one profile to its end, never half of
// the old and half of the new.
type Current struct{ p atomic.Pointer[Profile] }

// NewCurrent holds p.
func NewCurrent(p *Profile) *Current {
	c := &Current{}
	c.p.Store(p)
	return c
}

// Load is the profile in force.
func (c *Current) Load() *Profile { return c.p.Load() }

// Store puts p in force; the caller has validated it and applied what it
// changes.
func (c *Current) Store(p *Profile) { c.p.Store(p) }
