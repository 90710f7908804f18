package dedup_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDocListsEverySourceFile: the file list at the end of doc.go names
// every non-test Go file of the package, and only files that exist.
func TestDocListsEverySourceFile(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	item := regexp.MustCompile(`(?m)^//   - ([^:]*):`)
	name := regexp.MustCompile(`[\w.]+\.go`)
	var listed []string
	for _, m := range item.FindAllSubmatch(doc, -1) {
		for _, n := range name.FindAll(m[1], -1) {
			listed = append(listed, string(n))
		}
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f != "doc.go" && !strings.HasSuffix(f, "_test.go") && !slices.Contains(listed, f) {
			t.Errorf("doc.go's file list does not name %s", f)
		}
	}
	for _, f := range listed {
		if !slices.Contains(files, f) {
			t.Errorf("doc.go's file list names %s, which does not exist", f)
		}
	}
}
