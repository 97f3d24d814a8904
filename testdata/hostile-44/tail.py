
# =========================================================================================
ids = [c["id"] for c in CASES]
assert len(ids) == len(set(ids)), "duplicate ids"
with open(os.path.join(HERE, "cases.json"), "w", encoding="utf-8") as f:
    json.dump(CASES, f, indent=1, ensure_ascii=True)
    f.write("\n")
print("%d cases written" % len(CASES))
