package profile

import (
	"bufio"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// docsDefault is one row of docs/config.md whose Default column is a TOML
// literal.
type docsDefault struct {
	section, key, literal string
	line                  int
}

var (
	docsSection = regexp.MustCompile("^## `\\[\\[?([a-z_.]+)\\]\\]?`")
	// A row: | `key` | type | `literal` ... |
	docsRow = regexp.MustCompile("^\\| `([a-z_]+)` \\| [^|]+ \\| `([^`]+)`")
	// Any row of a key, whatever its default.
	docsKeyRow = regexp.MustCompile("^\\| `([a-z_]+)` \\|")
)

// docsDefaults reads every row of docs/config.md whose default is a literal
// (not "unset", "required" or a value derived from another key).
func docsDefaults(t *testing.T) []docsDefault {
	t.Helper()
	var out []docsDefault
	for _, row := range docsRows(t) {
		if row.literal != "" && !strings.ContainsAny(row.literal, "<…") {
			out = append(out, row)
		}
	}
	return out
}

// docsRows reads every key row of docs/config.md, with the literal of its
// Default column ("" when the default is not a literal).
func docsRows(t *testing.T) []docsDefault {
	t.Helper()
	f, err := os.Open("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []docsDefault
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := docsSection.FindStringSubmatch(line); m != nil {
			section = m[1]
			continue
		}
		if strings.HasPrefix(line, "## ") {
			section = "" // top level, or prose
			continue
		}
		m := docsKeyRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		row := docsDefault{section: section, key: m[1], line: n}
		if lit := docsRow.FindStringSubmatch(line); lit != nil {
			row.literal = lit[2]
		}
		out = append(out, row)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Every default docs/config.md states is the one the profile gets: the
// literal of each row, decoded as TOML into that key's field, equals the
// field of a minimal profile after defaults. A default changed in the code
// and not in the manual (or the other way round) fails here.
func TestDocsConfigDefaultsAreTheCodes(t *testing.T) {
	p, err := Parse(encode(t, minimal()))
	if err != nil {
		t.Fatal(err)
	}
	rows := docsDefaults(t)
	if len(rows) < 52 {
		t.Fatalf("read %d literal defaults from docs/config.md; the table format changed and this test checks nothing", len(rows))
	}
	for _, row := range rows {
		got, ok := profileField(reflect.ValueOf(p).Elem(), row.section, row.key)
		if !ok {
			t.Errorf("docs/config.md:%d: %s.%s is not a key of the profile", row.line, row.section, row.key)
			continue
		}
		want := reflect.New(got.Type())
		doc := fmt.Sprintf("v = %s\n", row.literal)
		holder := reflect.New(reflect.StructOf([]reflect.StructField{{Name: "V", Type: got.Type(), Tag: `toml:"v"`}}))
		if _, err := toml.Decode(doc, holder.Interface()); err != nil {
			t.Errorf("docs/config.md:%d: default %s of %s.%s is not a TOML value of its type %s: %v", row.line, row.literal, row.section, row.key, got.Type(), err)
			continue
		}
		want.Elem().Set(holder.Elem().Field(0))
		if !sameValue(want.Elem(), got) {
			t.Errorf("docs/config.md:%d: %s.%s defaults to %v in the code, the manual says %s", row.line, row.section, row.key, got.Interface(), row.literal)
		}
	}
}

// profileField is the field of key in section ("" for the top level, the
// first cluster for "clusters").
func profileField(p reflect.Value, section, key string) (reflect.Value, bool) {
	v := p
	for part := range strings.SplitSeq(section, ".") {
		if part == "" {
			break
		}
		f, ok := fieldByTag(v.Type(), part)
		if !ok {
			return reflect.Value{}, false
		}
		v = v.FieldByIndex(f.Index)
		if v.Kind() == reflect.Slice { // [[clusters]], [[pods.classes]]: the first
			v = v.Index(0)
		}
	}
	f, ok := fieldByTag(v.Type(), key)
	if !ok {
		return reflect.Value{}, false
	}
	return v.FieldByIndex(f.Index), true
}

// sameValue is reflect.DeepEqual, except that a nil and an empty slice or
// map are the same value (TOML's [] decodes to an empty one).
func sameValue(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Slice, reflect.Map:
		if a.Len() == 0 && b.Len() == 0 {
			return true
		}
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// Every key of the profile has its row in docs/config.md, so a key added to
// the code (and its default) cannot be left out of the manual.
func TestDocsConfigListsEveryKey(t *testing.T) {
	documented := map[string]bool{}
	for _, row := range docsRows(t) {
		documented[row.section+"."+row.key] = true
	}
	for _, key := range profileKeys(reflect.TypeFor[Profile](), "") {
		if !documented[key] {
			t.Errorf("profile key %s has no row in docs/config.md", strings.TrimPrefix(key, "."))
		}
	}
}

// profileKeys lists the keys of struct t as "section.key" ("" for the top
// level): one level of sections, as docs/config.md has.
func profileKeys(t reflect.Type, section string) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "-" {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
			if section == "" {
				keys = append(keys, "."+name) // [[clusters]] has a top-level row too
			}
			ft = ft.Elem()
		}
		if section == "" && ft.Kind() == reflect.Struct && ft != reflect.TypeFor[Duration]() {
			keys = append(keys, profileKeys(ft, name)...)
			continue
		}
		keys = append(keys, section+"."+name)
	}
	return keys
}
