// A small markdown renderer for model text. Everything is HTML-escaped first, so the model's text
// can never become markup: only the constructs below add tags, around escaped text.
// Fenced code blocks (with a copy button), inline code, **bold**, *italic*, headings, lists,
// quotes, paragraphs and http(s) links.

export function escapeHtml(s) {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}

// Inline constructs over already escaped text. Code spans are cut out first so that nothing
// inside them is formatted.
function inline(esc) {
  const parts = esc.split(/(`[^`\n]+`)/);
  return parts.map((p, i) => {
    if (i % 2) return `<code>${p.slice(1, -1)}</code>`;
    return p
      .replace(/\*\*([^*\n]+)\*\*/g, '<strong>$1</strong>')
      .replace(/(^|[^*\w])\*([^*\n]+)\*(?!\w)/g, '$1<em>$2</em>')
      .replace(/\[([^\]\n]+)\]\((https?:\/\/[^\s)"]+)\)/g, '<a href="$2" rel="noopener noreferrer" target="_blank">$1</a>');
  }).join('');
}

function blocks(text) {
  const out = [];
  let para = [], list = null;
  const flushPara = () => { if (para.length) out.push(`<p>${inline(para.join('<br>'))}</p>`); para = []; };
  const flushList = () => { if (list) out.push(`<${list.tag}>${list.items.map((x) => `<li>${inline(x)}</li>`).join('')}</${list.tag}>`); list = null; };
  for (const line of escapeHtml(text).split('\n')) {
    let m;
    if (!line.trim()) { flushPara(); flushList(); continue; }
    if ((m = /^(#{1,6})\s+(.*)$/.exec(line))) {
      flushPara(); flushList();
      const level = Math.min(6, m[1].length + 2); // the page's own headings are h1 and h2
      out.push(`<h${level}>${inline(m[2])}</h${level}>`);
    } else if ((m = /^\s*([-*+]|\d+[.)])\s+(.*)$/.exec(line))) {
      flushPara();
      const tag = /\d/.test(m[1]) ? 'ol' : 'ul';
      if (list && list.tag !== tag) flushList();
      if (!list) list = { tag, items: [] };
      list.items.push(m[2]);
    } else if ((m = /^&gt;\s?(.*)$/.exec(line))) {
      flushPara(); flushList();
      out.push(`<blockquote>${inline(m[1])}</blockquote>`);
    } else {
      flushList();
      para.push(line);
    }
  }
  flushPara(); flushList();
  return out.join('');
}

// The HTML of a message. An unclosed fence (a reply still streaming) is shown as code so far.
export function renderMarkdown(text) {
  const out = [];
  const fence = /^```[ \t]*([\w+-]*)[^\n]*\n([\s\S]*?)(?:^```[ \t]*$|(?![\s\S]))/gm;
  let at = 0, m;
  while ((m = fence.exec(text))) {
    out.push(blocks(text.slice(at, m.index)));
    const lang = m[1] ? `<span class="lang">${escapeHtml(m[1])}</span>` : '';
    out.push(`<div class="code">${lang}<button type="button" class="copy-code">Copy code</button>` +
             `<pre><code>${escapeHtml(m[2].replace(/\n$/, ''))}</code></pre></div>`);
    at = fence.lastIndex;
    if (m[0].length === 0) fence.lastIndex++;
  }
  out.push(blocks(text.slice(at)));
  return out.join('');
}
