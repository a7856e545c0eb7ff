// A plain `mdbook build docs`, without the mdbook-mermaid preprocessor on PATH, leaves each
// ```mermaid block as code; this turns such blocks into what the preprocessor writes, so that
// mermaid-init.js draws the diagrams either way. With the preprocessor there is nothing to do.
document.querySelectorAll('code.language-mermaid').forEach((code) => {
  const pre = document.createElement('pre');
  pre.className = 'mermaid';
  pre.textContent = code.textContent;
  code.parentElement.replaceWith(pre);
});
