"""The fixed sentence set every accuracy check runs on.

Varied on purpose: short queries (little context, so quantisation error shows most), long
and over-long sentences (truncation, heavy padding in a mixed batch), punctuation, numbers,
code, emoji, and non-Latin scripts (the uncased WordPiece vocabulary falls back to [UNK]
and single characters there). Fixed, so figures are comparable across builds.
"""

CHECK_SENTENCES: tuple[str, ...] = (
    "how do I reset my password",
    "cancel my subscription",
    "refund status",
    "ok",
    "hi",
    "What's the weather like in Berlin tomorrow?",
    "Where is the nearest train station?",
    "best pizza near me open now",
    "The quick brown fox jumps over the lazy dog near the riverbank at dawn.",
    "A man is playing a guitar on the street corner while people walk by.",
    "Machine learning models are increasingly deployed on edge devices with limited memory and compute budgets.",
    "After three weeks of negotiations, the committee finally agreed on a budget that satisfied neither side "
    "completely but avoided a shutdown.",
    "The mitochondria is the powerhouse of the cell, producing most of the chemical energy needed to power "
    "biochemical reactions.",
    "In 1969, Apollo 11 landed on the Moon; Neil Armstrong and Buzz Aldrin walked on its surface for about two "
    "and a quarter hours.",
    "Price: $1,299.99 (incl. 20% VAT)!!!",
    "Order #A-10293-XZ shipped on 2024-03-15 at 14:07 UTC.",
    "3.14159 2.71828 1.41421 1.61803",
    "Call +1 (555) 010-9999 ext. 42",
    "???!!! ... --- ;;; :)",
    "e-mail: first.last@example.com, url: https://example.com/a?b=c&d=e",
    "Le chat est sur la table et il dort profondément.",
    "¿Dónde está la biblioteca? Necesito devolver un libro.",
    "Der Zug nach München hat heute leider zwanzig Minuten Verspätung.",
    "東京は日本の首都です。",
    "Москва — столица России.",
    "مرحبا، كيف حالك اليوم؟",
    "यह एक परीक्षण वाक्य है।",
    "Emoji test 🚀🔥 with mixed CASE and    extra   spaces",
    "CamelCaseIdentifiersAndSnake_case_names_in_code()",
    "def add(a, b): return a + b  # simple python function",
    "SELECT id, name FROM users WHERE age > 30 ORDER BY name;",
    "I absolutely loved this movie, the acting was superb and the story kept me hooked until the very end.",
    "This product broke after two days. Terrible quality, would not recommend to anyone.",
    # Longer than any max_length we use: exercises truncation.
    " ".join(["Long inputs are truncated to the maximum sequence length of the model."] * 30),
)

# What backends are compared on (torch vs ONNX Runtime, CUDA FP16 vs CPU FP32): the check set
# plus a lone letter, digits only, and long non-English text that is truncated.
SERVING_SENTENCES: tuple[str, ...] = (
    *CHECK_SENTENCES,
    "a",
    "42",
    "0000 1111 2222 3333 4444 5555 6666 7777 8888 9999",
    "Wie spät ist es? Es ist halb neun, und der Bus nach Köln fährt gleich.",
    " ".join(["Ceci est une très longue phrase française qui sera tronquée par le tokeniseur."] * 20),
    "北京欢迎你 " * 40,
)

# Chinese customer-service messages: the multilingual encoder (e5-embed) is checked on these too,
# since reading Chinese is what it is built for.
CHINESE_CHECK_SENTENCES: tuple[str, ...] = (
    "今天天气怎么样",
    "我的订单什么时候发货？",
    "怎么申请退款？",
    "我忘记密码了，怎么重置？",
    "快递显示已签收，但我没有收到包裹。",
    "可以开发票吗？",
    "会员怎么取消自动续费？",
    "商品有质量问题，我想换货。",
    "客服电话是多少？人工客服几点上班？",
    "优惠券为什么用不了？",
)
