package profile

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxProfileBytes bounds the profile file; nothing legitimate comes near it.
const MaxProfileBytes = 1 << 20

// ErrInvalidProfile is wrapped by every error about a profile's content
// (syntax, unknown keys, wrong types, invalid values); check it with
// errors.Is. The error itself is a *ProfileError listing every problem.
var ErrInvalidProfile = errors.New("invalid profile")

// ProfileError lists every problem of a profile at once. Its message puts
// one problem on each line, starting with its key path, e.g.
// `clusters[1].token_file: required`.
type ProfileError struct {
	// File is the profile's path; "" when it was parsed from memory.
	File string
	// Syntax is why the file is not a TOML document (with the line), or
	// that it is too large to read; "" when it was read.
	Syntax string
	// Errs are the problems of the content in file order: unknown keys
	// and wrong types, then invalid values. Each has the TOML key path,
	// array indexes included, and a type callers may branch on.
	Errs field.ErrorList
}

func (e *ProfileError) Error() string {
	var b strings.Builder
	b.WriteString(ErrInvalidProfile.Error())
	if e.File != "" {
		b.WriteString(" ")
		b.WriteString(e.File)
	}
	problems := e.Problems()
	if len(problems) == 1 {
		b.WriteString(": ")
		b.WriteString(problems[0])
		return b.String()
	}
	if len(problems) > 0 {
		b.WriteString(":")
	}
	for _, p := range problems {
		b.WriteString("\n  ")
		b.WriteString(p)
	}
	return b.String()
}

// Problems renders each problem as one line, as docs/config.md quotes them.
func (e *ProfileError) Problems() []string {
	var lines []string
	if e.Syntax != "" {
		lines = append(lines, e.Syntax)
	}
	for _, fe := range e.Errs {
		lines = append(lines, problemText(fe))
	}
	return lines
}

// Unwrap makes errors.Is(err, ErrInvalidProfile) hold.
func (e *ProfileError) Unwrap() error { return ErrInvalidProfile }

// Load reads the profile at path (at most MaxProfileBytes) and parses it.
// Errors name the file.
func Load(path string) (*Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read profile: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxProfileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read profile %s: %w", path, err)
	}
	p, err := Parse(data)
	if perr, ok := errors.AsType[*ProfileError](err); ok {
		perr.File = path
	}
	return p, err
}

// Parse decodes a profile strictly (unknown keys, matched case-sensitively,
// and values of the wrong type are errors), applies the defaults and
// validates the result. It reports every problem at once in a
// *ProfileError.
func Parse(data []byte) (*Profile, error) {
	if len(data) > MaxProfileBytes {
		return nil, &ProfileError{Syntax: fmt.Sprintf("larger than %d bytes", MaxProfileBytes)}
	}
	var tree map[string]any
	if _, err := toml.Decode(string(data), &tree); err != nil {
		return nil, &ProfileError{Syntax: syntaxProblem(err)}
	}
	var s shape
	s.table(tree, profileType, nil)
	p, err := s.decode(data, tree)
	if err != nil {
		return nil, &ProfileError{Syntax: err.Error(), Errs: s.errs}
	}
	setDefaults(p)
	for _, e := range validateProfile(p) {
		if !s.covers(e.Field) {
			s.errs = append(s.errs, e)
		}
	}
	if len(s.errs) > 0 {
		return nil, &ProfileError{Errs: s.errs}
	}
	return p, nil
}

// decode decodes the tree, which the walk left holding exactly what fits
// the Go types, into a Profile. When the walk removed something, it
// re-encodes the tree, so that what was removed (a key differing only in
// case, a mistyped value) cannot reach the decoder, which matches keys
// case-insensitively. Keys the decoder leaves over are reported as unknown.
func (s *shape) decode(data []byte, tree map[string]any) (*Profile, error) {
	src := data
	if s.changed {
		var buf bytes.Buffer
		if err := toml.NewEncoder(&buf).Encode(tree); err != nil {
			return nil, fmt.Errorf("re-encode: %w", err)
		}
		src = buf.Bytes()
	}
	var p Profile
	md, err := toml.Decode(string(src), &p)
	if err != nil {
		return nil, errors.New(syntaxProblem(err))
	}
	for _, k := range md.Undecoded() {
		var path *field.Path
		for _, part := range k {
			path = path.Child(tomlKey(part))
		}
		s.errs = append(s.errs, unknownKey(path))
	}
	return &p, nil
}

func syntaxProblem(err error) string {
	if pe, ok := errors.AsType[toml.ParseError](err); ok {
		return fmt.Sprintf("line %d: %s", pe.Position.Line, pe.Message)
	}
	return err.Error()
}

// unknownKey is a key the profile's types do not have: not allowed, so
// Forbidden, worded for a file rather than an API object.
func unknownKey(path *field.Path) *field.Error { return field.Forbidden(path, "unknown key") }

var (
	profileType       = reflect.TypeFor[Profile]()
	textUnmarshalType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// shape walks the generic TOML tree alongside the Go types, reports keys the
// types do not have and values of the wrong type with their full paths
// (array indexes included, which toml.MetaData cannot give), and removes
// them from the tree.
type shape struct {
	errs field.ErrorList
	// bad are the paths of removed values: validation problems at or below
	// them would only repeat the type error.
	bad     []string
	changed bool
}

// fail reports a value and marks it for removal from the tree.
func (s *shape) fail(e *field.Error) {
	s.errs = append(s.errs, e)
	s.bad = append(s.bad, e.Field)
	s.changed = true
}

// wrongType reports v where the key takes want, e.g. "a table".
func (s *shape) wrongType(path *field.Path, v any, want string) {
	s.fail(field.TypeInvalid(path, v, "must be "+want+", not "+tomlType(v)))
}

// covers reports whether path is at or below a removed value.
func (s *shape) covers(path string) bool {
	for _, b := range s.bad {
		if path == b || strings.HasPrefix(path, b+".") || strings.HasPrefix(path, b+"[") {
			return true
		}
	}
	return false
}

// table checks a TOML table against struct type t; keys are matched to the
// fields' toml tags exactly. path is nil for the document itself.
func (s *shape) table(m map[string]any, t reflect.Type, path *field.Path) {
	for _, key := range sortedKeys(m) {
		kp := path.Child(tomlKey(key))
		f, ok := fieldByTag(t, key)
		if !ok {
			s.fail(unknownKey(kp))
			delete(m, key)
			continue
		}
		v, ok := s.value(m[key], f.Type, kp)
		if !ok {
			delete(m, key)
			continue
		}
		m[key] = v
	}
}

// value checks one value against t and returns it, normalised for
// re-encoding; false means it was reported and must be removed.
func (s *shape) value(v any, t reflect.Type, path *field.Path) (any, bool) {
	if reflect.PointerTo(t).Implements(textUnmarshalType) {
		return v, s.text(v, t, path)
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			s.wrongType(path, v, "a table")
			return nil, false
		}
		s.table(m, t, path)
		return m, true
	case reflect.Map:
		return s.stringMap(v, t.Elem(), path)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct {
			return s.tables(v, t.Elem(), path)
		}
		return v, s.scalars(v, t.Elem().Kind(), path)
	}
	return v, s.scalar(v, t.Kind(), path)
}

// textExample is what a value of t looks like, for a wrong type's message.
func textExample(t reflect.Type) string {
	if t == reflect.TypeFor[Quantity]() {
		return "a string such as \"500m\" or \"16Gi\""
	}
	return "a string such as \"30s\""
}

// text checks a string that t (a Duration or a Quantity) parses itself.
func (s *shape) text(v any, t reflect.Type, path *field.Path) bool {
	str, ok := v.(string)
	if !ok {
		s.wrongType(path, v, textExample(t))
		return false
	}
	if err := reflect.New(t).Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(str)); err != nil {
		s.fail(field.Invalid(path, str, err.Error()))
		return false
	}
	return true
}

// stringMap checks a table of free keys (pods.node_selector) whose values
// are of type elem; a wrong value is removed alone.
func (s *shape) stringMap(v any, elem reflect.Type, path *field.Path) (any, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		s.wrongType(path, v, "a table")
		return nil, false
	}
	for _, key := range sortedKeys(m) {
		if _, ok := s.value(m[key], elem, path.Child(tomlKey(key))); !ok {
			delete(m, key)
		}
	}
	return m, true
}

// scalars checks an array of strings or integers (elements of kind k).
func (s *shape) scalars(v any, k reflect.Kind, path *field.Path) bool {
	a, ok := v.([]any)
	if !ok {
		what := "an array of strings"
		if k != reflect.String {
			what = "an array of integers"
		}
		s.wrongType(path, v, what)
		return false
	}
	for i, e := range a {
		if !s.scalar(e, k, path.Index(i)) {
			return false
		}
	}
	return true
}

// tables checks an array of tables of struct type elem, written either as
// [[key]] sections or inline.
func (s *shape) tables(v any, elem reflect.Type, path *field.Path) (any, bool) {
	var elems []any
	switch a := v.(type) {
	case []map[string]any:
		for _, e := range a {
			elems = append(elems, e)
		}
	case []any:
		elems = a
	default:
		s.wrongType(path, v, "an array of tables")
		return nil, false
	}
	out := make([]map[string]any, len(elems))
	for i, e := range elems {
		m, ok := e.(map[string]any)
		if !ok {
			// Keep the element so the indexes of the others stay.
			s.wrongType(path.Index(i), e, "a table")
			m = map[string]any{}
		} else {
			s.table(m, elem, path.Index(i))
		}
		out[i] = m
	}
	return out, true
}

// scalar checks a string, boolean or number of kind k.
func (s *shape) scalar(v any, k reflect.Kind, path *field.Path) bool {
	var ok bool
	switch k {
	case reflect.String:
		if _, ok = v.(string); !ok {
			s.wrongType(path, v, "a string")
		}
	case reflect.Bool:
		if _, ok = v.(bool); !ok {
			s.wrongType(path, v, "true or false")
		}
	case reflect.Int, reflect.Int64:
		ok = s.integer(v, k == reflect.Int, path)
	case reflect.Float32:
		ok = s.number(v, path)
	default:
		panic("fleet: profile field of unhandled kind " + k.String())
	}
	return ok
}

// integer checks an integer; asInt means it must fit a Go int.
func (s *shape) integer(v any, asInt bool, path *field.Path) bool {
	n, ok := v.(int64)
	switch {
	case !ok:
		s.wrongType(path, v, "an integer")
	case asInt && int64(int(n)) != n:
		s.fail(field.Invalid(path, n, "out of range"))
	default:
		return true
	}
	return false
}

// number checks a number that must fit a float32: an integer only up to
// 2^24, which a float32 holds exactly.
func (s *shape) number(v any, path *field.Path) bool {
	switch n := v.(type) {
	case int64:
		if n > 1<<24 || n < -(1<<24) {
			s.fail(field.Invalid(path, n, "out of range"))
			return false
		}
	case float64:
		if math.IsInf(n, 0) || math.Abs(n) > math.MaxFloat32 {
			s.fail(field.Invalid(path, n, "out of range"))
			return false
		}
	default:
		s.wrongType(path, v, "a number")
		return false
	}
	return true
}

// fieldByTag finds the field of struct t whose toml tag is exactly key.
func fieldByTag(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("toml"), ","); name == key && name != "-" {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// tomlKey quotes one key as TOML would need it, so that paths read as the
// file does: pods.node_selector."bad key".
func tomlKey(key string) string { return toml.Key{key}.String() }

// sortedKeys keeps the report deterministic (Go maps have no order).
func sortedKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

// tomlType names the TOML type of a decoded value.
func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case map[string]any:
		return "a table"
	case []map[string]any, []any:
		return "an array"
	default:
		return "a date/time"
	}
}
