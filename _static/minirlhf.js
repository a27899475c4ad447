/* minirlhf: the book's own scripts. Jupyter Book adds every .js file in _static/ to every page,
   after the page's MathJax configuration and before MathJax itself runs (it is deferred). */

/* ---- MathJax: the accessibility explorer, turned on from MathJax's menu ---------------------
   MathJax 3.2.2 loads the explorer and the speech rule engine (all vendored, see
   _vendor/mathjax/README.txt) only when a reader turns them on. Its menu then re-renders the
   page's math before the engine is ready, and the math disappears (mathjax/MathJax#3124). The
   maintainers' fix: let that re-render wait and retry until what it needs has loaded. */
(function () {
  if (!window.MathJax) return; // a page without math does not load MathJax
  const startup = (window.MathJax.startup = window.MathJax.startup || {});
  const ready = startup.ready;
  startup.ready = function () {
    const {mathjax} = MathJax._.mathjax;
    const {STATE} = MathJax._.core.MathItem;
    const {Menu} = MathJax._.ui.menu.Menu;
    const rerender = Menu.prototype.rerender;
    Menu.prototype.rerender = function (start = STATE.TYPESET) {
      mathjax.handleRetriesFor(() => rerender.call(this, start));
    };
    return ready ? ready.call(this) : MathJax.startup.defaultReady();
  };
})();

/* ---- Search: result snippets show math as text ----------------------------------------------
   Sphinx's search takes a result's snippet from the page's HTML, where math is still TeX
   source: "\(\beta\,\mathrm{KL}\)". texToText turns it into "β KL". */
const minirlhfTexToText = (function () {
  const NAMES = {
    alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", varepsilon: "ε", zeta: "ζ",
    eta: "η", theta: "θ", vartheta: "ϑ", iota: "ι", kappa: "κ", lambda: "λ", mu: "μ", nu: "ν",
    xi: "ξ", pi: "π", rho: "ρ", sigma: "σ", tau: "τ", upsilon: "υ", phi: "φ", varphi: "φ",
    chi: "χ", psi: "ψ", omega: "ω", Gamma: "Γ", Delta: "Δ", Theta: "Θ", Lambda: "Λ", Xi: "Ξ",
    Pi: "Π", Sigma: "Σ", Phi: "Φ", Psi: "Ψ", Omega: "Ω",
    cdot: "·", times: "×", pm: "±", mp: "∓", approx: "≈", sim: "~", propto: "∝", le: "≤",
    leq: "≤", ge: "≥", geq: "≥", ne: "≠", neq: "≠", equiv: "≡", in: "∈", notin: "∉",
    to: "→", rightarrow: "→", leftarrow: "←", Rightarrow: "⇒", mapsto: "↦", infty: "∞",
    sum: " Σ", prod: " Π", int: " ∫", nabla: "∇", partial: "∂", mid: " | ", "|": "‖", dots: "…",
    ldots: "…", cdots: "⋯", "{": "{", "}": "}", _: "_", "%": "%", "&": "&", "#": "#",
    "\\": "; ", ",": " ", ";": " ", ":": " ", " ": " ", "!": "", quad: " ", qquad: " ",
  };
  const WORDS = new Set(["log", "ln", "exp", "min", "max", "arg", "sin", "cos", "tan", "det",
    "lim", "sup", "inf", "Pr", "argmin", "argmax"]);
  const FONTS = new Set(["mathrm", "text", "texttt", "textrm", "textit", "textbf", "textsf",
    "mathit", "mathbf", "mathsf", "mathtt", "boldsymbol", "bm", "mathcal", "mathbb",
    "mathfrak", "mathscr", "operatorname", "emph", "mbox"]);
  const FRACTIONS = new Set(["frac", "tfrac", "dfrac", "cfrac"]);
  const ACCENTS = {bar: "\u0304", overline: "\u0305", hat: "\u0302", widehat: "\u0302",
    tilde: "\u0303", widetilde: "\u0303", dot: "\u0307", ddot: "\u0308", vec: "\u20D7"};
  const IGNORED = new Set(["left", "right", "middle", "big", "Big", "bigg", "Bigg", "bigl",
    "bigr", "Bigl", "Bigr", "biggl", "biggr", "displaystyle", "textstyle", "limits",
    "nolimits", "nonumber", "notag"]);
  const SUPERSCRIPT = {0: "⁰", 1: "¹", 2: "²", 3: "³", 4: "⁴", 5: "⁵", 6: "⁶", 7: "⁷",
    8: "⁸", 9: "⁹", "+": "⁺", "-": "⁻", "=": "⁼", "(": "⁽", ")": "⁾", n: "ⁿ", i: "ⁱ"};
  const COMMAND = /^\\([a-zA-Z]+|.)/;
  // What may follow an operator name without a space: log(x), min_i, max\big(...).
  const OPENS = /^\s*(\\(left|[bB]igg?l?)\s*)?[(\[{_^]/;

  // A group of one symbol stays as it is; a longer one gets parentheses: a/b, (a + b)/2.
  const wrap = (text) => (/^([\p{L}\p{N}.]+|\(.*\))$/u.test(text) ? text : `(${text})`);

  function convert(tex) {
    let out = "", i = 0;
    const argument = () => { // the next {group} or single token, converted
      while (tex[i] === " ") i++;
      if (tex[i] === "{") {
        let depth = 1, j = i + 1;
        for (; j < tex.length && depth; j++) {
          if (tex[j] === "\\") j++;
          else if (tex[j] === "{") depth++;
          else if (tex[j] === "}") depth--;
        }
        const inner = tex.slice(i + 1, j - 1);
        i = j;
        return convert(inner).trim();
      }
      const command = COMMAND.exec(tex.slice(i));
      if (command) {
        i += command[0].length;
        return convert(command[0]).trim();
      }
      return tex[i++] || "";
    };
    while (i < tex.length) {
      const c = tex[i];
      if (c === "\\") {
        const name = COMMAND.exec(tex.slice(i))[1];
        i += name.length + 1;
        if (FONTS.has(name)) out += argument();
        else if (FRACTIONS.has(name)) {
          const top = argument(), bottom = argument();
          out += `${wrap(top)}/${wrap(bottom)}`;
        } else if (name === "binom") {
          const n = argument(), k = argument();
          out += `binom(${n}, ${k})`;
        } else if (name === "sqrt") out += "√" + wrap(argument());
        else if (name in ACCENTS) {
          const base = argument();
          out += [...base].length === 1 ? base + ACCENTS[name] : base;
        } else if (name === "begin" || name === "end") argument();
        else if (IGNORED.has(name)) continue;
        else if (WORDS.has(name)) out += name + (OPENS.test(tex.slice(i)) ? "" : " ");
        else if (name in NAMES) out += NAMES[name];
        else out += name;
      } else if (c === "^" || c === "_") {
        i++;
        const script = argument();
        if (c === "^" && script && [...script].every((ch) => ch in SUPERSCRIPT)) {
          out += [...script].map((ch) => SUPERSCRIPT[ch]).join("");
        } else out += c + wrap(script);
      } else {
        i++;
        if (c === "{" || c === "}" || c === "&") continue;
        out += c === "~" ? " " : c;
      }
    }
    return out;
  }

  return function texToText(tex) {
    const body = tex.trim().replace(/^(\\\(|\\\[|\$\$?)/, "").replace(/(\\\)|\\\]|\$\$?)$/, "");
    return convert(body).replace(/\s+/g, " ").replace(/\( /g, "(").replace(/ ([),;])/g, "$1")
      .trim();
  };
})();

document.addEventListener("DOMContentLoaded", () => {
  if (typeof Search === "undefined" || !Search.htmlToText) return;
  const htmlToText = Search.htmlToText;
  Search.htmlToText = (htmlString, anchor) => {
    const doc = new DOMParser().parseFromString(htmlString, "text/html");
    doc.querySelectorAll(".math").forEach((el) => {
      const text = minirlhfTexToText(el.textContent);
      el.textContent = el.tagName === "DIV" ? ` ${text} ` : text; // a display stands apart
    });
    return htmlToText(doc.documentElement.outerHTML, anchor);
  };
});

/* ---- Downloads: a file name that says which notebook it is ----------------------------------
   The solved notebook and the learner's have the same name on the server; saved side by side,
   one would overwrite or shadow the other. */
document.addEventListener("DOMContentLoaded", () => {
  const names = {
    "btn-download-learner-notebook-button": (file) => file,
    "btn-download-solved-notebook-button": (file) => file.replace(/\.ipynb$/, "_solved.ipynb"),
    "btn-download-course-archive-button": (file) => file,
  };
  for (const [cls, name] of Object.entries(names)) {
    document.querySelectorAll(`a.${cls}`).forEach((a) => {
      a.download = name(decodeURIComponent(new URL(a.href).pathname.split("/").pop()));
      a.removeAttribute("target"); // a download needs no new tab
    });
  }
});

/* ---- Scrolling blocks: a keyboard can reach them, and a screen reader names them -------------
   A code cell, a printed output or a wide table that scrolls (on a phone, most of them) must
   take the keyboard's focus, or a reader without a mouse cannot scroll it (WCAG 2.1.1). The
   theme gives such blocks a tab stop only 300 ms after the window last changed size, and no
   name. Here a block gets its tab stop the moment its size changes (a turned phone, an opened
   hint) and, while it scrolls, a role and a name ("Output 3, scrollable"); a block that fits
   loses all three again. "Scrolls" is measured as the theme measures it, so the two agree. */
(function () {
  const KINDS = [
    // [selector, name]; the first that matches names the block
    [".cell_output pre, .cell_output > .output, .nboutput .output_area", "Output"],
    ["pre", "Code"],
    [".mr-check", "Check report"],
    [".pst-scrollable-table-container, .table-wrapper", "Table"],
    [".jp-RenderedHTMLCommon", "Output"],
  ];
  const ALL = KINDS.map(([selector]) => selector).join(", ");
  const names = new Map();
  const scrolls = (el) => el.scrollWidth > el.clientWidth || el.scrollHeight > el.clientHeight;

  function update(el) {
    if (!names.has(el)) return;
    const mine = el.hasAttribute("data-mr-scroll");
    if (scrolls(el)) {
      el.tabIndex = 0;
      if (!mine && el.hasAttribute("role")) return; // a role of its own stays
      el.setAttribute("data-mr-scroll", "");
      el.setAttribute("role", "region");
      el.setAttribute("aria-label", names.get(el));
    } else {
      el.tabIndex = -1;
      if (!mine) return;
      el.removeAttribute("data-mr-scroll");
      el.removeAttribute("role");
      el.removeAttribute("aria-label");
    }
  }

  function start() {
    const counts = {};
    for (const el of document.querySelectorAll(ALL)) {
      const name = KINDS.find(([selector]) => el.matches(selector))[1];
      counts[name] = (counts[name] || 0) + 1;
      names.set(el, `${name} ${counts[name]}, scrollable`);
    }
    // Called once for every block when it is first observed, then whenever its size changes,
    // before the browser draws the new layout.
    const observer = new ResizeObserver((entries) => entries.forEach((e) => update(e.target)));
    names.forEach((_, el) => observer.observe(el));
    const all = () => names.forEach((_, el) => update(el));
    window.addEventListener("resize", all);
    window.addEventListener("load", all); // fonts and math change what fits
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

/* ---- The reference list: list items -----------------------------------------------------------
   Sphinx gives each entry of the bibliography role="doc-biblioentry", a role ARIA has
   deprecated; a screen reader then meets a list without items. DPUB-ARIA's advice: listitem. */
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll('[role="list"] > [role="doc-biblioentry"]').forEach((entry) => {
    entry.setAttribute("role", "listitem");
  });
});
