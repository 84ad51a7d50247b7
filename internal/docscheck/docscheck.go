package docscheck

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// Problem is one pointer that does not resolve.
type Problem struct {
	File string // slash-separated, relative to the root
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

// skipDirs are not walked: Git's own files, build output, and test
// fixtures, whose documents may be broken on purpose.
var skipDirs = map[string]bool{".git": true, "testdata": true, "vendor": true, "node_modules": true}

// Check walks the repository at root and returns what its documents,
// sources and build files point at that does not exist, sorted by file
// and line. The error is for a walk that failed, not for a problem found.
func Check(root string) ([]Problem, error) {
	c := &checker{root: root, topDirs: map[string]bool{}, docs: map[string]doc{}}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && !skipDirs[e.Name()] && e.Name() != "bin" {
			c.topDirs[e.Name()] = true
		}
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (skipDirs[d.Name()] || rel == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		kind := kindOf(rel)
		if kind == skip {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if kind == markdown {
			c.markdown(rel, string(src))
		} else {
			c.source(rel, string(src))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(c.problems, func(i, j int) bool {
		a, b := c.problems[i], c.problems[j]
		if a.File != b.File {
			return a.File < b.File
		}
		return a.Line < b.Line
	})
	return c.problems, nil
}

type fileKind int

const (
	skip fileKind = iota
	markdown
	sourceFile
)

func kindOf(rel string) fileKind {
	base := path.Base(rel)
	switch {
	case strings.HasSuffix(base, ".md"):
		return markdown
	case base == "Makefile" || base == "Dockerfile" || strings.HasPrefix(rel, ".ci/"):
		return sourceFile
	}
	switch path.Ext(base) {
	case ".go", ".yaml", ".yml", ".sh", ".py":
		return sourceFile
	}
	return skip
}

type checker struct {
	root     string
	topDirs  map[string]bool // the root's directories: where a repository path starts
	docs     map[string]doc  // by the Markdown file's path
	problems []Problem
}

func (c *checker) report(file string, line int, format string, args ...any) {
	c.problems = append(c.problems, Problem{File: file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// chunk is a run of lines read together (a paragraph, a fenced block, a
// file's source), joined into text with each line's leading white space
// and comment marker (//, #) dropped, so that a mention broken across
// comment lines reads as one.
type chunk struct {
	first  int   // line number of the first line
	starts []int // offset in text of each line
	text   string
}

var commentMarker = regexp.MustCompile(`^[ \t]*(?://+|#+)?[ \t]*`)

func newChunk(first int, lines []string) chunk {
	var b strings.Builder
	ch := chunk{first: first, starts: make([]int, 0, len(lines))}
	for i, l := range lines {
		if i > 0 {
			b.WriteByte(' ')
		}
		ch.starts = append(ch.starts, b.Len())
		b.WriteString(l[len(commentMarker.FindString(l)):])
	}
	ch.text = b.String()
	return ch
}

func (ch chunk) line(off int) int {
	i := sort.Search(len(ch.starts), func(i int) bool { return ch.starts[i] > off })
	return ch.first + i - 1
}

var (
	fenceOpen  = regexp.MustCompile("^[ \t]*(`{3,}|~{3,})")
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	// A link's target, after "](" of an inline link or "]:" of a
	// reference definition.
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^()<>\s]*)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?([^<>\s]+)>?`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// markdown checks one Markdown file: its links, and the mentions in its
// text, code spans and code blocks.
func (c *checker) markdown(rel, src string) {
	lines := strings.Split(src, "\n")
	var (
		para      []string
		paraFirst int
		fence     string // the open fence's marker, "" outside one
		block     []string
		blockAt   int
	)
	flush := func() {
		if len(para) > 0 {
			c.prose(rel, newChunk(paraFirst, para))
			para = nil
		}
	}
	for i, l := range lines {
		n := i + 1
		if fence != "" {
			if closesFence(l, fence) {
				c.mentions(rel, newChunk(blockAt, block))
				fence, block = "", nil
				continue
			}
			block = append(block, l)
			continue
		}
		if m := fenceOpen.FindStringSubmatch(l); m != nil {
			flush()
			fence, blockAt = m[1], n+1
			continue
		}
		if strings.TrimSpace(l) == "" {
			flush()
			continue
		}
		if len(para) == 0 {
			paraFirst = n
		}
		para = append(para, l)
	}
	flush()
	if fence != "" {
		c.report(rel, blockAt-1, "a code block opened with %s is never closed, so the rest of the file is not checked", fence)
	}
}

// prose checks a paragraph: its links, then its mentions with the code
// spans' backticks and the links' targets blanked out, and the text of a
// link already reported too, which would repeat the report when it names
// the same file ("[docs/x](docs/x)").
func (c *checker) prose(rel string, ch chunk) {
	spans := codeSpans(ch.text)
	plain := []byte(ch.text)
	for _, s := range spans { // no link inside a code span
		for i := s[0]; i < s[1]; i++ {
			plain[i] = ' '
		}
	}
	// Each link as [text start, target start, target end); the text
	// start is -1 for a reference definition, which has none.
	var links [][3]int
	for _, m := range inlineLink.FindAllSubmatchIndex(plain, -1) {
		links = append(links, [3]int{linkText(plain, m[0]), m[2], m[3]})
	}
	if m := refDef.FindSubmatchIndex(plain); m != nil {
		links = append(links, [3]int{-1, m[2], m[3]})
	}
	mention := []byte(ch.text)
	blank := func(from, to int) {
		for i := from; i < to; i++ {
			mention[i] = ' '
		}
	}
	for _, l := range links {
		if !c.link(rel, ch.line(l[1]), ch.text[l[1]:l[2]]) && l[0] >= 0 {
			blank(l[0], l[1])
		}
		blank(l[1], l[2])
	}
	for i, b := range mention {
		if b == '`' {
			mention[i] = ' '
		}
	}
	ch.text = string(mention)
	c.mentions(rel, ch)
}

// linkText returns where the text of the link whose "]" is at end starts:
// after its matching "[", or end when there is none.
func linkText(text []byte, end int) int {
	depth := 0
	for i := end; i >= 0; i-- {
		switch text[i] {
		case ']':
			depth++
		case '[':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return end
}

// codeSpans returns the [start, end) of each code span in text, backticks
// included: a run of backticks up to the next run of the same length.
func codeSpans(text string) [][2]int {
	var spans [][2]int
	run := func(i int) int {
		j := i
		for j < len(text) && text[j] == '`' {
			j++
		}
		return j - i
	}
	for i := 0; i < len(text); {
		if text[i] != '`' {
			i++
			continue
		}
		n := run(i)
		end := -1
		for j := i + n; j < len(text); {
			if text[j] != '`' {
				j++
				continue
			}
			m := run(j)
			if m == n {
				end = j + m
				break
			}
			j += m
		}
		if end < 0 { // a literal run of backticks
			i += n
			continue
		}
		spans = append(spans, [2]int{i, end})
		i = end
	}
	return spans
}

// link checks a Markdown link's target, relative to the file rel, and
// tells whether it resolved.
func (c *checker) link(rel string, line int, target string) bool {
	if target == "" || scheme.MatchString(target) {
		return true
	}
	p, frag, _ := strings.Cut(target, "#")
	if u, err := url.PathUnescape(p); err == nil {
		p = u
	}
	if f, err := url.PathUnescape(frag); err == nil {
		frag = f
	}
	file := rel
	if p != "" {
		if strings.HasPrefix(p, "/") {
			file = path.Clean(strings.TrimPrefix(p, "/"))
		} else {
			file = path.Join(path.Dir(rel), p)
		}
		if file == ".." || strings.HasPrefix(file, "../") {
			c.report(rel, line, "link %q leaves the repository", target)
			return false
		}
		if !c.exists(file) {
			c.report(rel, line, "link %q: %s does not exist", target, file)
			return false
		}
	}
	if frag != "" && strings.HasSuffix(file, ".md") && c.isFile(file) {
		return c.anchor(rel, line, fmt.Sprintf("link %q", target), file, frag)
	}
	return true
}

// anchor reports frag when no heading or <a id> of the Markdown file
// makes it, and tells whether one does.
func (c *checker) anchor(rel string, line int, what, file, frag string) bool {
	ids := c.docOf(file).ids
	if ids[frag] {
		return true
	}
	msg := fmt.Sprintf("%s: no heading of %s has the anchor #%s", what, file, frag)
	if near := nearest(ids, frag); near != "" {
		msg += fmt.Sprintf(" (closest: #%s)", near)
	}
	c.report(rel, line, "%s", msg)
	return false
}

// nearest is the anchor sharing the longest prefix with frag, for the
// message; "" when none shares a word's worth.
func nearest(ids map[string]bool, frag string) string {
	best, bestN := "", 3
	for id := range ids {
		n := 0
		for n < len(id) && n < len(frag) && id[n] == frag[n] {
			n++
		}
		if n > bestN || (n == bestN && best != "" && id < best) {
			best, bestN = id, n
		}
	}
	return best
}

var (
	// mdMention is a Markdown file named in text, such as
	// docs/resilience.md or README.md#quick-start: a path that does not start
	// with "/" (absolute, or the tail of a URL).
	mdMention = regexp.MustCompile(`(?:^|[^\w./-])((?:\.\.?/)*(?:[\w.-]+/)*[\w.-]*\w\.md)\b(#[\w-]+)?`)
	// A section of a document named in prose: the document's path
	// followed by ", Some heading)" or " (Some heading)". Only headings
	// starting with a capital letter are taken, to leave asides such as
	// "(see below)".
	sectionComma = regexp.MustCompile(`(?:^|[^\w./-])((?:\.\.?/)*(?:[\w.-]+/)*[\w.-]*\w\.md), ([A-Z][^()]*?)\)`)
	sectionParen = regexp.MustCompile(`(?:^|[^\w./-])((?:\.\.?/)*(?:[\w.-]+/)*[\w.-]*\w\.md) \(([A-Z][^()]*?)\)`)
	// pathMention is a file under a directory named in text, such as
	// components/proxy/attempt.go. Whether it is the repository's is
	// decided by its first directory (checker.mentions).
	pathMention = regexp.MustCompile(`(?:^|[^\w./-])((?:\./)?([\w.-]+)/(?:[\w.-]+/)*[\w.-]*\w\.(?:go|ya?ml|json|sh|txt|patch|svg|py))\b`) // pathExts
)

// source checks the mentions in a source or build file. Only the lines
// that may hold one are read, each with the two after it, where a
// section's name may go on (a regexp over a whole file is slow under the
// race detector, which make unit uses).
func (c *checker) source(rel, src string) {
	lines := strings.Split(src, "\n")
	const context = 2
	start, end := -1, -1 // the lines [start, end) to read together
	for i, l := range lines {
		if !strings.Contains(l, ".md") && !(strings.Contains(l, "/") && hasPathExt(l)) {
			continue
		}
		if start >= 0 && i > end {
			c.mentions(rel, newChunk(start+1, lines[start:end]))
			start = -1
		}
		if start < 0 {
			start = i
		}
		end = min(i+1+context, len(lines))
	}
	if start >= 0 {
		c.mentions(rel, newChunk(start+1, lines[start:end]))
	}
}

// mentions checks the files and sections named in a chunk of text.
func (c *checker) mentions(rel string, ch chunk) {
	dir := path.Dir(rel)
	if strings.Contains(ch.text, ".md") {
		c.mdMentions(rel, dir, ch)
	}
	if strings.Contains(ch.text, "/") && hasPathExt(ch.text) {
		c.pathMentions(rel, dir, ch)
	}
}

// pathExts are the extensions pathMention takes, for a quick look before it.
var pathExts = []string{".go", ".yaml", ".yml", ".json", ".sh", ".txt", ".patch", ".svg", ".py"}

func hasPathExt(text string) bool {
	for _, e := range pathExts {
		if strings.Contains(text, e) {
			return true
		}
	}
	return false
}

func (c *checker) mdMentions(rel, dir string, ch chunk) {
	for _, m := range mdMention.FindAllStringSubmatchIndex(ch.text, -1) {
		name := ch.text[m[2]:m[3]]
		file := c.resolveMD(dir, name)
		line := ch.line(m[2])
		if file == "" {
			c.report(rel, line, "mentions %s, which does not exist", name)
			continue
		}
		if m[4] >= 0 {
			c.anchor(rel, line, "mention of "+ch.text[m[2]:m[5]], file, ch.text[m[4]+1:m[5]])
		}
	}
	for _, re := range []*regexp.Regexp{sectionComma, sectionParen} {
		for _, m := range re.FindAllStringSubmatchIndex(ch.text, -1) {
			name, heading := ch.text[m[2]:m[3]], strings.TrimSpace(ch.text[m[4]:m[5]])
			file := c.resolveMD(dir, name)
			if file == "" {
				continue // reported above
			}
			if !c.docOf(file).sections[sectionKey(heading)] {
				c.report(rel, ch.line(m[2]), "names the section %q of %s, which has no such heading", heading, file)
			}
		}
	}
}

func (c *checker) pathMentions(rel, dir string, ch chunk) {
	for _, m := range pathMention.FindAllStringSubmatchIndex(ch.text, -1) {
		name, first := strings.TrimPrefix(ch.text[m[2]:m[3]], "./"), ch.text[m[4]:m[5]]
		var file string
		switch {
		case c.topDirs[first]:
			file = name
		case c.isDir(path.Join(dir, first)):
			file = path.Join(dir, name)
		default:
			continue // not a path in this repository (net/http, pkg/…)
		}
		if !c.exists(file) {
			c.report(rel, ch.line(m[2]), "mentions %s, which does not exist", name)
		}
	}
}

// resolveMD finds the Markdown file a mention in dir names: from the
// root, from dir, or (a bare name) in docs/. "" when none exists.
func (c *checker) resolveMD(dir, name string) string {
	cands := []string{path.Clean(name), path.Join(dir, name)}
	if !strings.Contains(name, "/") {
		cands = append(cands, path.Join("docs", name))
	}
	for _, f := range cands {
		if f != ".." && !strings.HasPrefix(f, "../") && c.isFile(f) {
			return f
		}
	}
	return ""
}

func (c *checker) exists(rel string) bool {
	_, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(rel)))
	return err == nil
}

func (c *checker) isFile(rel string) bool {
	fi, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(rel)))
	return err == nil && fi.Mode().IsRegular()
}

func (c *checker) isDir(rel string) bool {
	fi, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(rel)))
	return err == nil && fi.IsDir()
}

// doc is what links and mentions can point at in a Markdown file.
type doc struct {
	ids      map[string]bool // anchors
	sections map[string]bool // sectionKey of each heading
}

// docOf reads a Markdown file's anchors and headings, once.
func (c *checker) docOf(rel string) doc {
	if d, ok := c.docs[rel]; ok {
		return d
	}
	d := doc{ids: map[string]bool{}, sections: map[string]bool{}}
	if src, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(rel))); err == nil {
		for _, id := range Anchors(string(src)) {
			d.ids[id] = true
		}
		for _, h := range headings(string(src)) {
			d.sections[sectionKey(h)] = true
		}
	}
	c.docs[rel] = d
	return d
}

// sectionKey compares a heading named in prose with the heading itself,
// whatever the spaces between its words.
func sectionKey(text string) string {
	return strings.Join(strings.FieldsFunc(Slug(headingText(text)), func(r rune) bool { return r == '-' }), "-")
}

// Anchors returns the anchors GitHub gives a Markdown document, in order:
// each heading's id (Slug of its text, with -1, -2, … for repeats), then
// each <a id> or <a name>.
func Anchors(src string) []string {
	var ids []string
	seen := map[string]int{}
	for _, h := range headings(src) {
		// github-slugger: a repeat gets the first free of -1, -2, …
		base := Slug(headingText(h))
		id := base
		for {
			if _, dup := seen[id]; !dup {
				break
			}
			seen[base]++
			id = fmt.Sprintf("%s-%d", base, seen[base])
		}
		seen[id] = 0
		ids = append(ids, id)
	}
	for _, m := range htmlAnchor.FindAllStringSubmatch(src, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// headings returns the text of each ATX heading outside code blocks.
func headings(src string) []string {
	var (
		hs    []string
		fence string
	)
	for _, l := range strings.Split(src, "\n") {
		if fence != "" {
			if closesFence(l, fence) {
				fence = ""
			}
			continue
		}
		if m := fenceOpen.FindStringSubmatch(l); m != nil {
			fence = m[1]
			continue
		}
		if m := atxHeading.FindStringSubmatch(l); m != nil {
			hs = append(hs, m[2])
		}
	}
	return hs
}

// closesFence tells whether line l ends the code block opened by fence.
func closesFence(l, fence string) bool {
	t := strings.TrimSpace(l)
	return strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == ""
}

var (
	mdLink  = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag = regexp.MustCompile(`<[^>]*>`)
)

// headingText is the text a heading renders to: links as their text,
// code spans without their backticks, no HTML tags.
func headingText(s string) string {
	s = mdLink.ReplaceAllString(s, "$1")
	s = htmlTag.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, "`", "")
}

// Slug is GitHub's id for a heading's rendered text (github-slugger):
// lower case; letters, digits, marks, hyphens and underscores kept, every
// space a hyphen, everything else dropped.
func Slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || unicode.In(r, unicode.L, unicode.N, unicode.M, unicode.Pc):
			b.WriteRune(r)
		}
	}
	return b.String()
}
