// The campaign review page: sort and filter the variant cards, enlarge a creative.
(() => {
  const cards = [...document.querySelectorAll("article.variant")];
  const filters = [...document.querySelectorAll("select[data-filter]")];
  const camel = (name) => name.replace(/-([a-z])/g, (_, c) => c.toUpperCase());
  function apply() {
    let shown = 0;
    for (const card of cards) {
      const ok = filters.every((s) => !s.value || card.dataset[camel(s.dataset.filter)] === s.value);
      card.hidden = !ok;
      if (ok) shown++;
    }
    document.getElementById("shown").textContent = shown;
  }
  function sort() {
    const by = document.getElementById("sort").value;
    const value = (c) => (c.dataset[by] === "" ? -Infinity : Number(c.dataset[by]));
    for (const grid of document.querySelectorAll(".grid")) {
      const mine = cards.filter((c) => c.parentElement === grid);
      const order = by ? [...mine].sort((a, b) => value(b) - value(a)) : mine;
      for (const c of order) grid.appendChild(c);
    }
  }
  for (const s of filters) s.addEventListener("change", apply);
  document.getElementById("sort").addEventListener("change", sort);
  const dialog = document.getElementById("large");
  for (const b of document.querySelectorAll("button.enlarge")) {
    b.addEventListener("click", () => {
      dialog.querySelector("img").src = b.dataset.src;
      dialog.showModal();
    });
  }
  apply();
})();
