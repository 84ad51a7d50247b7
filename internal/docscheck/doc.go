// Package docscheck keeps the repository's documentation pointing at
// things that exist. Check walks a repository and reports:
//
//   - a relative Markdown link whose file or directory is missing;
//   - a link's #anchor that no heading of the target file makes, by
//     GitHub's rules for heading ids (Slug), and no <a id> or <a name>
//     names;
//   - a mention of a repository file in Markdown, Go, the Makefile, YAML
//     or scripts, such as docs/resilience.md or a .go, .yaml or .sh file
//     under one of the repository's top-level directories, that names a
//     missing file;
//   - a mention of a document's section in prose, the document's path
//     followed by ", Some heading)" or " (Some heading)", whose heading
//     is gone.
//
// External links (with a scheme, such as https:) are not followed. The
// test TestRepository runs Check over this repository in `make unit`.
package docscheck
