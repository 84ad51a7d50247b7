// Package docscheck keeps the repository's documentation pointing at
// things that exist. Check walks a repository (all but .git, bin/,
// testdata/ and vendored trees) and reports:
//
//   - a relative Markdown link whose file or directory is missing, or that
//     leaves the repository;
//   - a link's #anchor that no heading of the target file makes, by
//     GitHub's rules for heading ids (Slug: repeats get -1, -2, …), and
//     no <a id> or <a name> names;
//   - a Markdown file named in text (prose, code spans, code blocks, Go
//     comments and strings, the Makefile, YAML, scripts) that exists
//     neither from the root, nor beside the file naming it, nor in docs/;
//     with an #anchor, the anchor is checked as a link's is;
//   - a repository file named in the same places, such as
//     components/proxy/attempt.go or a .yaml, .json, .sh or .txt file,
//     that is missing. A path counts as the repository's when its first
//     directory is one of the root's (components/, docs/, …) or one beside
//     the file naming it (harness/ in e2e/README.md); others, such as
//     net/http or an upstream project's pkg/, are left alone;
//   - a document's section named in prose, the document's path followed
//     by ", Some heading)" or " (Some heading)", when the document has no
//     such heading.
//
// External links (with a scheme, such as https:) are not followed.
// TestRepository runs Check over this repository in `make unit`, and
// TestDocsIndex keeps docs/README.md listing every page of docs/.
package docscheck
