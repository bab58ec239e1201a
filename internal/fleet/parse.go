package fleet

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
)

// MaxProfileBytes bounds the profile file; nothing legitimate comes near it.
const MaxProfileBytes = 1 << 20

// ErrInvalidProfile is wrapped by every error about a profile's content
// (syntax, unknown keys, wrong types, invalid values); check it with
// errors.Is. The error itself is a *ProfileError listing every problem.
var ErrInvalidProfile = errors.New("invalid profile")

// ProfileError lists every problem of a profile at once, each starting with
// its key path, e.g. `clusters[1].token_file: required`.
type ProfileError struct {
	// File is the profile's path; "" when it was parsed from memory.
	File string
	// Problems are in file order: syntax, then unknown keys and wrong
	// types, then invalid values.
	Problems []string
}

func (e *ProfileError) Error() string {
	var b strings.Builder
	b.WriteString(ErrInvalidProfile.Error())
	if e.File != "" {
		b.WriteString(" ")
		b.WriteString(e.File)
	}
	if len(e.Problems) == 1 {
		b.WriteString(": ")
		b.WriteString(e.Problems[0])
		return b.String()
	}
	b.WriteString(":")
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p)
	}
	return b.String()
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
		return nil, &ProfileError{Problems: []string{fmt.Sprintf("larger than %d bytes", MaxProfileBytes)}}
	}
	var tree map[string]any
	if _, err := toml.Decode(string(data), &tree); err != nil {
		return nil, &ProfileError{Problems: []string{syntaxProblem(err)}}
	}
	var s shape
	s.table(tree, profileType, "")

	// The tree is now exactly what fits the Go types; decode it into them.
	// When the walk removed something, re-encode the tree, so that what it
	// removed (a key differing only in case, a mistyped value) cannot reach
	// the decoder, which matches keys case-insensitively.
	src := data
	if s.changed {
		var buf bytes.Buffer
		if err := toml.NewEncoder(&buf).Encode(tree); err != nil {
			return nil, &ProfileError{Problems: append(s.problems, "re-encode: "+err.Error())}
		}
		src = buf.Bytes()
	}
	var p Profile
	md, err := toml.Decode(string(src), &p)
	if err != nil {
		return nil, &ProfileError{Problems: append(s.problems, syntaxProblem(err))}
	}
	problems := s.problems
	for _, k := range md.Undecoded() {
		problems = append(problems, "unknown key "+k.String())
	}

	setDefaults(&p)
	for _, e := range validateProfile(&p) {
		if !s.covers(e.Field) {
			problems = append(problems, problemText(e))
		}
	}
	if len(problems) > 0 {
		return nil, &ProfileError{Problems: problems}
	}
	return &p, nil
}

func syntaxProblem(err error) string {
	if pe, ok := errors.AsType[toml.ParseError](err); ok {
		return fmt.Sprintf("line %d: %s", pe.Position.Line, pe.Message)
	}
	return err.Error()
}

var (
	profileType       = reflect.TypeFor[Profile]()
	textUnmarshalType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// shape walks the generic TOML tree alongside the Go types, reports keys the
// types do not have and values of the wrong type with their full paths
// (array indexes included, which toml.MetaData cannot give), and removes
// them from the tree.
type shape struct {
	problems []string
	// bad are the paths of removed values: validation problems at or below
	// them would only repeat the type error.
	bad     []string
	changed bool
}

func (s *shape) fail(path, msg string) {
	s.problems = append(s.problems, path+": "+msg)
	s.bad = append(s.bad, path)
	s.changed = true
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
// fields' toml tags exactly.
func (s *shape) table(m map[string]any, t reflect.Type, path string) {
	for _, key := range sortedKeys(m) {
		kp := joinKey(path, key)
		f, ok := fieldByTag(t, key)
		if !ok {
			s.problems = append(s.problems, "unknown key "+kp)
			delete(m, key)
			s.changed = true
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
func (s *shape) value(v any, t reflect.Type, path string) (any, bool) {
	if reflect.PointerTo(t).Implements(textUnmarshalType) {
		str, ok := v.(string)
		if !ok {
			s.fail(path, "must be a string such as \"30s\", not "+tomlType(v))
			return nil, false
		}
		if err := reflect.New(t).Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(str)); err != nil {
			s.problems = append(s.problems, fmt.Sprintf("%s %q: %v", path, str, err))
			s.bad = append(s.bad, path)
			s.changed = true
			return nil, false
		}
		return str, true
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			s.fail(path, "must be a table, not "+tomlType(v))
			return nil, false
		}
		s.table(m, t, path)
		return m, true
	case reflect.Map: // map[string]string
		m, ok := v.(map[string]any)
		if !ok {
			s.fail(path, "must be a table, not "+tomlType(v))
			return nil, false
		}
		for _, key := range sortedKeys(m) {
			if _, ok := s.value(m[key], t.Elem(), joinKey(path, key)); !ok {
				delete(m, key)
			}
		}
		return m, true
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return s.strings(v, path)
		}
		// of structs: an array of tables
		var elems []any
		switch a := v.(type) {
		case []map[string]any:
			for _, e := range a {
				elems = append(elems, e)
			}
		case []any:
			elems = a
		default:
			s.fail(path, "must be an array of tables, not "+tomlType(v))
			return nil, false
		}
		out := make([]map[string]any, len(elems))
		for i, e := range elems {
			ip := fmt.Sprintf("%s[%d]", path, i)
			m, ok := e.(map[string]any)
			if !ok {
				// Keep the element so the indexes of the others stay.
				s.fail(ip, "must be a table, not "+tomlType(e))
				m = map[string]any{}
			} else {
				s.table(m, t.Elem(), ip)
			}
			out[i] = m
		}
		return out, true
	case reflect.String:
		if _, ok := v.(string); !ok {
			s.fail(path, "must be a string, not "+tomlType(v))
			return nil, false
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			s.fail(path, "must be true or false, not "+tomlType(v))
			return nil, false
		}
	case reflect.Int, reflect.Int64:
		n, ok := v.(int64)
		if !ok {
			s.fail(path, "must be an integer, not "+tomlType(v))
			return nil, false
		}
		if t.Kind() == reflect.Int && int64(int(n)) != n {
			s.fail(path, "out of range")
			return nil, false
		}
	case reflect.Float32:
		switch n := v.(type) {
		case int64:
			if n > 1<<24 || n < -(1<<24) {
				s.fail(path, "out of range")
				return nil, false
			}
		case float64:
			if math.IsInf(n, 0) || math.Abs(n) > math.MaxFloat32 {
				s.fail(path, "out of range")
				return nil, false
			}
		default:
			s.fail(path, "must be a number, not "+tomlType(v))
			return nil, false
		}
	default:
		panic("fleet: profile field of unhandled kind " + t.Kind().String())
	}
	return v, true
}

// strings checks an array of strings.
func (s *shape) strings(v any, path string) (any, bool) {
	a, ok := v.([]any)
	if !ok {
		s.fail(path, "must be an array of strings, not "+tomlType(v))
		return nil, false
	}
	for i, e := range a {
		if _, ok := e.(string); !ok {
			s.fail(fmt.Sprintf("%s[%d]", path, i), "must be a string, not "+tomlType(e))
			return nil, false
		}
	}
	return v, true
}

// fieldByTag finds the field of struct t whose toml tag is exactly key.
func fieldByTag(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("toml"), ","); name == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// tomlKey quotes one key as TOML would need it, so that paths read as the
// file does: pods.node_selector."bad key".
func tomlKey(key string) string { return toml.Key{key}.String() }

// joinKey appends one key to a dotted path, quoted as TOML would need it.
func joinKey(path, key string) string {
	k := tomlKey(key)
	if path == "" {
		return k
	}
	return path + "." + k
}

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
