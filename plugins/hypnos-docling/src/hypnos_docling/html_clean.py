"""An HTML page reduced to its main content before docling reads it: the site's navigation, header, footer and
sidebars dropped, the pilcrow/permalink anchors that documentation generators put after headings removed, and each
`<pre>` reduced to its text in one `<code>` (a highlighted listing's `<b>`/`<span>` marks became inline code spans and
emphasis around a broken fence)."""

from __future__ import annotations

_CHROME = ["nav", "header", "footer", "aside", "script", "style", "noscript"]
_ROLES = ["navigation", "banner", "contentinfo", "search", "complementary"]
_PERMALINK_TEXT = {"\u00b6", "#", "\u00a7", "\U0001f517"}


def main_content(data: bytes) -> bytes:
    """The page with only its main content (`<main>`, `role=main` or `<article>` when it has one)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(data, "html.parser")
    for anchor in soup.find_all("a"):
        classes = set(anchor.get("class") or [])
        permalink = classes & {"headerlink", "anchor", "anchorjs-link", "permalink"}
        if permalink or anchor.get_text(strip=True) in _PERMALINK_TEXT:
            anchor.decompose()
    for pre in soup.find_all("pre"):
        text = pre.get_text()
        pre.clear()
        code = soup.new_tag("code")
        code.string = text
        pre.append(code)
    main = soup.find("main") or soup.find(role="main") or soup.find("article")
    for tag in soup.find_all(_CHROME):
        if tag.decomposed or tag is main or (main is not None and (main in tag.parents or tag in main.parents)):
            continue
        if main is None and tag.name == "header" and tag.find(["h1", "h2"]) is not None:
            continue  # no main element: a header holding the page's title stays
        tag.decompose()
    for tag in soup.find_all(role=_ROLES):
        if not tag.decomposed and (main is None or main not in tag.parents):
            tag.decompose()
    if main is not None and soup.body is not None:
        title = soup.title
        soup.body.clear()
        soup.body.append(main)
        if title is not None and soup.head is None:
            soup.insert(0, title)
    return str(soup).encode()
